"""JetStream through its JSON API, over a Transport: what the worker needs of it.

Stream info, consumer create and delete, publishes acknowledged by their stream, message gets
(STREAM.MSG.GET, answered by the stream's leader), KV buckets (get, create, update with
Nats-Expected-Last-Subject-Sequence, put, delete, purge, a listing of the latest value of the
keys under a filter, a wait for the next change of a key) and object stores (read, and add an
object in 128 KiB chunks). Pull requests and acknowledgements are the worker's (worker.py).

API requests go through the JetStream API prefix ("$JS.API", "$JS.DOMAIN.API" for another
domain, or another account's imported prefix), and so do KV writes (PREFIX.$KV.BUCKET.KEY)
when the prefix is not the default, as the NATS clients do (docs/protocol.md); the chunks and
descriptions of objects are published on their own subjects, as the NATS clients do.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Optional

from .natsclient import nuid
from .protocol import format_time_ns
from .transport import Msg, Transport

DEFAULT_API = "$JS.API"
CHUNK_SIZE = 128 << 10

# JetStream API error codes.
ERR_NO_MESSAGE = 10037
ERR_WRONG_LAST_SEQUENCE = 10071
ERR_STREAM_NOT_FOUND = 10059


class JetStreamError(Exception):
    """An error the JetStream API answered with."""

    def __init__(self, description: str, code: int = 0, err_code: int = 0):
        super().__init__(description)
        self.code, self.err_code = code, err_code


class WrongRevision(JetStreamError):
    """A compare-and-set found another revision (the key changed, or exists on a create)."""


def api_prefix(domain: str = "", prefix: str = "") -> str:
    """The API prefix of a JetStream domain or of an imported prefix (exclusive)."""
    if domain and prefix:
        raise ValueError("give a JetStream domain or an API prefix, not both")
    if domain:
        return f"$JS.{domain}.API"
    return prefix.rstrip(".") if prefix else DEFAULT_API


@dataclass
class RawMsg:
    subject: str
    seq: int
    data: bytes
    headers: dict[str, list[str]]

    def header(self, name: str) -> str:
        for k, v in self.headers.items():
            if k.lower() == name.lower() and v:
                return v[0]
        return ""


def _parse_hdrs(b64: Optional[str]) -> dict[str, list[str]]:
    if not b64:
        return {}
    from .natsclient import parse_headers

    headers, _, _ = parse_headers(base64.b64decode(b64))
    return headers


class JetStream:
    def __init__(self, nc: Transport, api: str = DEFAULT_API, timeout: float = 5.0):
        self.nc, self.api, self.timeout = nc, api, timeout

    def write_subject(self, subject: str) -> str:
        """A KV write's subject: through the API prefix unless it is the default."""
        return subject if self.api == DEFAULT_API else f"{self.api}.{subject}"

    async def request(self, what: str, body: Optional[dict] = None, timeout: Optional[float] = None) -> dict:
        msg = await self.nc.request(f"{self.api}.{what}", json.dumps(body).encode() if body is not None else b"",
                                    timeout or self.timeout)
        return self._answer(what, msg)

    @staticmethod
    def _answer(what: str, msg: Msg) -> dict:
        try:
            resp = json.loads(msg.data) if msg.data else {}
        except ValueError:
            raise JetStreamError(f"{what}: the answer is not JSON: {msg.data[:80]!r}") from None
        err = resp.get("error")
        if err:
            cls = WrongRevision if err.get("err_code") == ERR_WRONG_LAST_SEQUENCE else JetStreamError
            raise cls(f"{what}: {err.get('description', 'error')}", err.get("code", 0), err.get("err_code", 0))
        return resp

    async def stream_info(self, stream: str) -> dict:
        return await self.request(f"STREAM.INFO.{stream}")

    async def create_consumer(self, stream: str, name: str, config: dict) -> dict:
        """Creates or updates the consumer name (durable or not) of stream."""
        cfg = dict(config, name=name)
        return await self.request(f"CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": cfg})

    async def delete_consumer(self, stream: str, name: str) -> None:
        try:
            await self.request(f"CONSUMER.DELETE.{stream}.{name}")
        except JetStreamError:
            pass

    async def publish(self, subject: str, data: bytes, headers: Optional[dict[str, str]] = None,
                      timeout: Optional[float] = None) -> dict:
        """Publishes to a stream and returns its acknowledgement ({"stream", "seq"})."""
        msg = await self.nc.request(subject, data, timeout or self.timeout, headers)
        return self._answer(f"publish on {subject}", msg)

    async def msg_get(self, stream: str, req: dict) -> Optional[RawMsg]:
        """A stored message (last_by_subj, or seq with next_by_subj); None when there is none."""
        try:
            resp = await self.request(f"STREAM.MSG.GET.{stream}", req)
        except JetStreamError as e:
            if e.err_code == ERR_NO_MESSAGE:
                return None
            raise
        m = resp["message"]
        return RawMsg(m.get("subject", ""), int(m.get("seq", 0)), base64.b64decode(m.get("data") or ""), _parse_hdrs(m.get("hdrs")))


@dataclass
class Entry:
    key: str
    value: bytes
    revision: int
    operation: str = "PUT"  # PUT, DEL or PURGE


class KV:
    """A KV bucket: its stream is KV_BUCKET, its subjects $KV.BUCKET.KEY."""

    def __init__(self, js: JetStream, bucket: str):
        self.js, self.bucket, self.stream = js, bucket, "KV_" + bucket
        self.prefix = f"$KV.{bucket}."

    def _entry(self, m: RawMsg) -> Entry:
        op = m.header("KV-Operation") or "PUT"
        return Entry(m.subject[len(self.prefix):], m.data, m.seq, op)

    async def get_any(self, key: str) -> Optional[Entry]:
        """The key's last message, a delete or purge marker included."""
        m = await self.js.msg_get(self.stream, {"last_by_subj": self.prefix + key})
        return self._entry(m) if m else None

    async def get(self, key: str) -> Optional[Entry]:
        """The key's value; None when absent, deleted or purged."""
        e = await self.get_any(key)
        return e if e is not None and e.operation == "PUT" else None

    async def _put(self, key: str, value: bytes, headers: Optional[dict[str, str]] = None) -> int:
        ack = await self.js.publish(self.js.write_subject(self.prefix + key), value, headers)
        return int(ack.get("seq", 0))

    async def put(self, key: str, value: bytes) -> int:
        return await self._put(key, value)

    async def update(self, key: str, value: bytes, revision: int) -> int:
        """Writes on revision (0: the key must never have been written); WrongRevision else."""
        return await self._put(key, value, {"Nats-Expected-Last-Subject-Sequence": str(revision)})

    async def create(self, key: str, value: bytes) -> int:
        """Writes when the key is absent or deleted (as the NATS clients' Create)."""
        try:
            return await self.update(key, value, 0)
        except WrongRevision:
            last = await self.get_any(key)
            if last is not None and last.operation != "PUT":
                return await self.update(key, value, last.revision)
            raise

    async def delete(self, key: str, last_revision: int = 0) -> None:
        h = {"KV-Operation": "DEL"}
        if last_revision:
            h["Nats-Expected-Last-Subject-Sequence"] = str(last_revision)
        await self._put(key, b"", h)

    async def purge(self, key: str) -> None:
        await self._put(key, b"", {"KV-Operation": "PURGE", "Nats-Rollup": "sub"})

    async def _consumer(self, filter_subject: str, deliver_policy: str, headers_only: bool = False):
        """An ephemeral push consumer delivering to a new inbox subscription."""
        inbox = self.js.nc.new_inbox()
        sub = await self.js.nc.subscribe(inbox)
        name = "reins_py_" + nuid(16)
        cfg = {"deliver_subject": inbox, "deliver_policy": deliver_policy, "ack_policy": "none",
               "filter_subject": filter_subject, "replay_policy": "instant", "mem_storage": True,
               "num_replicas": 1, "inactive_threshold": 10_000_000_000, "headers_only": headers_only}
        try:
            info = await self.js.create_consumer(self.stream, name, cfg)
        except BaseException:
            await sub.unsubscribe()
            raise
        return sub, name, info

    async def entries(self, key_filter: str, headers_only: bool = False) -> dict[str, Entry]:
        """The latest entry of every key matching key_filter (deleted keys left out)."""
        sub, name, info = await self._consumer(self.prefix + key_filter, "last_per_subject", headers_only)
        out: dict[str, Entry] = {}
        try:
            if info.get("num_pending", 0) == 0 and info.get("delivered", {}).get("consumer_seq", 0) == 0:
                return out
            while True:
                m = await sub.next(timeout=self.js.timeout)
                if m.status:  # heartbeats and flow control: not asked for
                    continue
                toks = m.reply.split(".")
                seq, pending = (int(toks[-4]), int(toks[-1])) if len(toks) == 9 else (int(toks[-5]), int(toks[-2]))
                e = Entry(m.subject[len(self.prefix):], m.data, seq, m.header("KV-Operation") or "PUT")
                if e.operation == "PUT":
                    out[e.key] = e
                else:
                    out.pop(e.key, None)
                if pending == 0:
                    return out
        finally:
            await sub.unsubscribe()
            await self.js.delete_consumer(self.stream, name)

    async def wait_change(self, key: str, revision: int, timeout: float) -> None:
        """Returns once key has another revision than revision, or after timeout seconds."""
        sub, name, _ = await self._consumer(self.prefix + key, "new", headers_only=True)
        try:
            e = await self.get_any(key)
            if (e.revision if e else 0) != revision:
                return
            try:
                while True:
                    m = await sub.next(timeout=max(timeout, 0.001))
                    if not m.status:
                        return
            except asyncio.TimeoutError:
                return
        finally:
            await sub.unsubscribe()
            await self.js.delete_consumer(self.stream, name)


class ObjectStore:
    """An object store: stream OBJ_BUCKET, descriptions on $O.BUCKET.M.NAME (base64 URL of the
    name), chunks on $O.BUCKET.C.NUID; the layout of the NATS clients' object stores."""

    def __init__(self, js: JetStream, bucket: str):
        self.js, self.bucket, self.stream = js, bucket, "OBJ_" + bucket

    def _meta_subject(self, name: str) -> str:
        return f"$O.{self.bucket}.M." + base64.urlsafe_b64encode(name.encode()).decode()

    async def info(self, name: str) -> Optional[dict]:
        m = await self.js.msg_get(self.stream, {"last_by_subj": self._meta_subject(name)})
        if m is None:
            return None
        info = json.loads(m.data)
        return None if info.get("deleted") else info

    async def get(self, name: str, max_size: int) -> Optional[bytes]:
        """The object's bytes; None when there is none. ValueError when it is larger than
        max_size or its chunks are not what its description says."""
        info = await self.info(name)
        if info is None:
            return None
        size = int(info.get("size", 0))
        if size > max_size:
            raise ValueError(f"object {name} is {size} bytes, more than {max_size}")
        chunks, seq, subj = [], 0, f"$O.{self.bucket}.C.{info['nuid']}"
        for _ in range(int(info.get("chunks", 0))):
            m = await self.js.msg_get(self.stream, {"seq": seq + 1, "next_by_subj": subj})
            if m is None:
                raise ValueError(f"object {name}: a chunk is missing")
            chunks.append(m.data)
            seq = m.seq
        data = b"".join(chunks)
        digest = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
        if len(data) != size or (info.get("digest") and info["digest"] != digest):
            raise ValueError(f"object {name} is not what its description says ({len(data)} bytes, want {size})")
        return data

    async def put(self, name: str, data: bytes) -> None:
        """Adds the object: its chunks, then its description (which makes it visible)."""
        obj_nuid = nuid()
        subj = f"$O.{self.bucket}.C.{obj_nuid}"
        n = 0
        for i in range(0, len(data), CHUNK_SIZE):
            await self.js.publish(subj, data[i:i + CHUNK_SIZE])
            n += 1
        info = {"name": name, "options": {"max_chunk_size": CHUNK_SIZE}, "bucket": self.bucket, "nuid": obj_nuid,
                "size": len(data), "mtime": format_time_ns(time.time_ns()), "chunks": n,
                "digest": "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()}
        await self.js.publish(self._meta_subject(name), json.dumps(info).encode(), {"Nats-Rollup": "sub"})
