"""A small asyncio client of the NATS protocol: the subset the worker needs.

CONNECT (with a token, or a user and password), PING/PONG, PUB/HPUB, SUB/UNSUB, MSG/HMSG
with headers and status codes, request/reply on one wildcard inbox. No TLS, no reconnection:
when the connection is lost the worker stops, and its supervisor starts it again (JetStream
delivers the tasks it held to another worker after their ack wait).

It exists because the package must install without PyPI (zero dependencies); Transport
(transport.py) is the seam where nats-py can replace it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import secrets
import string
from typing import Optional
from urllib.parse import unquote, urlsplit

from .transport import ConnectionLost, Msg, NoResponders, RequestTimeout, Subscription, Transport, TransportError

_ALPHABET = string.ascii_letters + string.digits


def nuid(n: int = 22) -> str:
    """A random token of letters and digits."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(n))


def parse_headers(block: bytes) -> tuple[dict[str, list[str]], str, str]:
    """Parses a header block "NATS/1.0[ STATUS[ DESCRIPTION]]\\r\\nK: V\\r\\n...\\r\\n\\r\\n"
    into headers, status and description."""
    text = block.decode(errors="replace")
    lines = text.split("\r\n")
    first = lines[0]
    if not first.startswith("NATS/1.0"):
        raise TransportError(f"malformed header block {first[:40]!r}")
    rest = first[len("NATS/1.0"):].strip()
    status, _, desc = rest.partition(" ")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(":")
        if not sep:
            continue
        headers.setdefault(k.strip(), []).append(v.strip())
    return headers, status, desc.strip()


def encode_headers(headers: dict[str, str]) -> bytes:
    out = "NATS/1.0\r\n"
    for k, v in headers.items():
        if any(c in k + v for c in "\r\n") or ":" in k:
            raise ValueError(f"header {k!r}: a name or value may not hold a line break, and a name no ':'")
        out += f"{k}: {v}\r\n"
    return (out + "\r\n").encode()


class _Sub(Subscription):
    def __init__(self, nc: "NATSConnection", sid: int, subject: str):
        self.nc, self.sid, self.subject = nc, sid, subject
        self.queue: asyncio.Queue = asyncio.Queue()

    async def next(self, timeout: Optional[float] = None) -> Msg:
        if self.queue.empty() and self.nc._lost.done():
            raise ConnectionLost(str(self.nc._lost.result()))
        get = asyncio.ensure_future(self.queue.get())
        lost = self.nc._lost
        done, _ = await asyncio.wait({get, lost}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        if lost in done:
            raise ConnectionLost(str(lost.result()))
        raise asyncio.TimeoutError()

    async def unsubscribe(self) -> None:
        if self.nc._subs.pop(self.sid, None) is not None and not self.nc._lost.done():
            self.nc._write(f"UNSUB {self.sid}\r\n".encode())


class NATSConnection(Transport):
    """A connection to one NATS server. Open it with connect()."""

    def __init__(self) -> None:
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._sids = itertools.count(1)
        self._subs: dict[int, _Sub] = {}
        self._pongs: list[asyncio.Future] = []
        self._inbox = "_INBOX." + nuid()
        self._resp: dict[str, asyncio.Future] = {}
        self._resp_sid = 0
        self._tokens = itertools.count(1)
        self._lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self._read_task: Optional[asyncio.Task] = None
        self.info: dict = {}

    @classmethod
    async def connect(cls, url: str, *, token: str = "", user: str = "", password: str = "",
                      name: str = "reins-worker-py", timeout: float = 5.0) -> "NATSConnection":
        """Connects to the first server of url (comma-separated nats://host:port, credentials
        may be in the URL: nats://TOKEN@host or nats://USER:PASS@host) that answers."""
        errors = []
        for one in [u.strip() for u in url.split(",") if u.strip()]:
            nc = cls()
            try:
                await asyncio.wait_for(nc._open(one, token, user, password, name), timeout)
                return nc
            except (OSError, asyncio.TimeoutError, TransportError) as e:
                errors.append(f"{one}: {e or type(e).__name__}")
                await nc.close()
        raise TransportError("cannot connect to NATS: " + "; ".join(errors or ["no URL given"]))

    async def _open(self, url: str, token: str, user: str, password: str, name: str) -> None:
        if "://" not in url:
            url = "nats://" + url
        u = urlsplit(url)
        if u.scheme not in ("nats", ""):
            raise TransportError(f"URL {url}: scheme {u.scheme!r} is not supported (nats:// only, no TLS)")
        if u.username and not u.password and not token:
            token = unquote(u.username)
        elif u.username and not user:
            user, password = unquote(u.username), unquote(u.password or "")
        self._reader, self._writer = await asyncio.open_connection(u.hostname or "127.0.0.1", u.port or 4222)
        line = await self._reader.readline()
        if not line.startswith(b"INFO "):
            raise TransportError(f"the server did not greet with INFO: {line[:60]!r}")
        self.info = json.loads(line[5:])
        self.max_payload = int(self.info.get("max_payload", 1 << 20))
        if self.info.get("tls_required"):
            raise TransportError("the server requires TLS, which this client does not speak")
        opts = {"verbose": False, "pedantic": False, "tls_required": False, "name": name, "lang": "python-reins",
                "version": "0.1.0", "protocol": 1, "headers": True, "no_responders": True}
        if token:
            opts["auth_token"] = token
        if user:
            opts["user"], opts["pass"] = user, password
        self._writer.write(b"CONNECT " + json.dumps(opts).encode() + b"\r\nPING\r\n")
        await self._writer.drain()
        while True:  # the answer to the PING, or the refusal
            line = await self._reader.readline()
            if not line:
                raise TransportError("the server closed the connection during CONNECT")
            if line.startswith(b"-ERR"):
                raise TransportError("the server refused the connection: " + line[4:].decode(errors="replace").strip().strip("'"))
            if line.startswith(b"PONG"):
                break
            if line.startswith(b"INFO "):
                self.info.update(json.loads(line[5:]))
        self._read_task = asyncio.ensure_future(self._read_loop())
        self._resp_sid = next(self._sids)
        self._write(f"SUB {self._inbox}.* {self._resp_sid}\r\n".encode())

    def _write(self, data: bytes) -> None:
        if self._lost.done() or self._writer is None:
            raise ConnectionLost(str(self._lost.result()) if self._lost.done() else "not connected")
        self._writer.write(data)

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as e:
            self._set_lost(e)
            raise ConnectionLost(str(e)) from None

    def _set_lost(self, reason: object) -> None:
        if not self._lost.done():
            self._lost.set_result(reason or "the connection closed")
        for f in self._pongs + list(self._resp.values()):
            if not f.done():
                f.set_exception(ConnectionLost(str(reason)))
        self._pongs.clear()
        self._resp.clear()

    def lost(self) -> asyncio.Future:
        return self._lost

    async def _read_loop(self) -> None:
        r = self._reader
        reason: object = "the server closed the connection"
        try:
            while True:
                line = await r.readline()
                if not line:
                    break
                if line.startswith(b"MSG "):
                    parts = line[4:].split()
                    size = int(parts[-1])
                    payload = await r.readexactly(size + 2)
                    reply = parts[2].decode() if len(parts) == 4 else ""
                    self._deliver(int(parts[1]), Msg(parts[0].decode(), reply, payload[:size]))
                elif line.startswith(b"HMSG "):
                    parts = line[5:].split()
                    hsize, total = int(parts[-2]), int(parts[-1])
                    block = await r.readexactly(total + 2)
                    headers, status, desc = parse_headers(block[:hsize])
                    reply = parts[2].decode() if len(parts) == 5 else ""
                    self._deliver(int(parts[1]), Msg(parts[0].decode(), reply, block[hsize:total], headers, status, desc))
                elif line.startswith(b"PING"):
                    self._writer.write(b"PONG\r\n")
                elif line.startswith(b"PONG"):
                    if self._pongs:
                        f = self._pongs.pop(0)
                        if not f.done():
                            f.set_result(None)
                elif line.startswith(b"-ERR"):
                    text = line[4:].decode(errors="replace").strip().strip("'")
                    if "Permissions Violation" not in text:
                        reason = "the server closed the connection: " + text
                        break
                    # A permissions violation is reported and the connection stays: the
                    # request it answered times out. Kept for whoever asks.
                    self.last_error = text
                elif line.startswith(b"INFO "):
                    self.info.update(json.loads(line[5:]))
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
            reason = e
        except asyncio.CancelledError:
            reason = "closed"
        self._set_lost(reason)

    def _deliver(self, sid: int, msg: Msg) -> None:
        if sid == self._resp_sid:
            f = self._resp.pop(msg.subject, None)
            if f is not None and not f.done():
                f.set_result(msg)
            return
        sub = self._subs.get(sid)
        if sub is not None:
            sub.queue.put_nowait(msg)

    async def publish(self, subject: str, data: bytes = b"", reply: str = "",
                      headers: Optional[dict[str, str]] = None) -> None:
        r = f" {reply}" if reply else ""
        if headers:
            h = encode_headers(headers)
            self._write(f"HPUB {subject}{r} {len(h)} {len(h) + len(data)}\r\n".encode() + h + data + b"\r\n")
        else:
            self._write(f"PUB {subject}{r} {len(data)}\r\n".encode() + data + b"\r\n")
        await self._drain()

    async def subscribe(self, subject: str) -> Subscription:
        sid = next(self._sids)
        sub = _Sub(self, sid, subject)
        self._subs[sid] = sub
        self._write(f"SUB {subject} {sid}\r\n".encode())
        await self._drain()
        return sub

    def new_inbox(self) -> str:
        return "_INBOX." + nuid()

    async def request(self, subject: str, data: bytes = b"", timeout: float = 5.0,
                      headers: Optional[dict[str, str]] = None) -> Msg:
        reply = f"{self._inbox}.{next(self._tokens)}"
        f = asyncio.get_running_loop().create_future()
        self._resp[reply] = f
        try:
            await self.publish(subject, data, reply, headers)
            msg = await asyncio.wait_for(asyncio.shield(f), timeout)
        except asyncio.TimeoutError:
            raise RequestTimeout(f"no answer on {subject} within {timeout:g}s") from None
        finally:
            self._resp.pop(reply, None)
        if msg.status == "503":
            raise NoResponders(f"nobody answers on {subject}")
        return msg

    async def flush(self, timeout: float = 5.0) -> None:
        f = asyncio.get_running_loop().create_future()
        self._pongs.append(f)
        try:
            self._write(b"PING\r\n")
            await self._drain()
        except BaseException:
            # Never sent: nobody will wait for its PONG, nor see the error close() would set.
            if f in self._pongs:
                self._pongs.remove(f)
            f.cancel()
            raise
        try:
            await asyncio.wait_for(asyncio.shield(f), timeout)
        except asyncio.TimeoutError:
            raise RequestTimeout(f"the server did not answer a PING within {timeout:g}s") from None

    async def close(self) -> None:
        if self._read_task is not None:
            self._read_task.cancel()
            try:
                await self._read_task
            except (asyncio.CancelledError, Exception):
                pass
        if self._writer is not None:
            try:
                self._writer.close()
                await self._writer.wait_closed()
            except (ConnectionError, OSError):
                pass
        self._set_lost("closed")


async def connect(url: str = "", **kw) -> NATSConnection:
    """Connects to url (default: $NATS_URL, else nats://127.0.0.1:4222)."""
    return await NATSConnection.connect(url or os.environ.get("NATS_URL", "nats://127.0.0.1:4222"), **kw)
