"""The interface between the worker and a NATS client.

The worker (worker.py, jetstream.py) needs only these operations of core NATS: publish with an
optional reply subject and headers, subscribe to a subject (messages arrive on a queue),
request/reply on an inbox, flush, and the server's max payload. natsclient.py implements them
on asyncio streams without any third-party package, because the package must install where
PyPI cannot be reached (zero dependencies). A transport over nats-py can be dropped in by
implementing Transport on a nats.aio.client.Client: nothing else changes.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass, field
from typing import Optional


class TransportError(Exception):
    """The connection failed, or the server refused a command."""


class ConnectionLost(TransportError):
    """The connection to the server is gone; the worker stops (a supervisor restarts it)."""


class NoResponders(TransportError):
    """A request found nobody listening on its subject (status 503)."""


class RequestTimeout(TransportError):
    """A request got no answer in time."""


@dataclass
class Msg:
    """A message received: its subject, reply subject, body and headers. status is set (e.g.
    "404", "408", "503") for the status messages of the server, which have no body."""

    subject: str
    reply: str = ""
    data: bytes = b""
    headers: dict[str, list[str]] = field(default_factory=dict)
    status: str = ""
    description: str = ""

    def header(self, name: str) -> str:
        """The first value of a header, matched without case; "" when absent."""
        for k, v in self.headers.items():
            if k.lower() == name.lower() and v:
                return v[0]
        return ""


class Subscription(abc.ABC):
    """A subscription whose messages queue up until read with next."""

    @abc.abstractmethod
    async def next(self, timeout: Optional[float] = None) -> Msg:
        """The next message; asyncio.TimeoutError after timeout seconds (None: wait forever);
        ConnectionLost when the connection is gone."""

    @abc.abstractmethod
    async def unsubscribe(self) -> None:
        """Stops the subscription; messages already queued may still be read."""


class Transport(abc.ABC):
    """Core NATS, as the worker uses it."""

    #: The largest message the server takes, headers included (its INFO's max_payload).
    max_payload: int = 1 << 20

    @abc.abstractmethod
    async def publish(self, subject: str, data: bytes = b"", reply: str = "",
                      headers: Optional[dict[str, str]] = None) -> None:
        """Publishes a message (PUB, or HPUB when headers are given)."""

    @abc.abstractmethod
    async def subscribe(self, subject: str) -> Subscription:
        """Subscribes to subject (wildcards allowed)."""

    @abc.abstractmethod
    async def request(self, subject: str, data: bytes = b"", timeout: float = 5.0,
                      headers: Optional[dict[str, str]] = None) -> Msg:
        """Publishes with a reply inbox and returns the first answer; NoResponders when no one
        listens, RequestTimeout when none comes within timeout seconds."""

    @abc.abstractmethod
    def new_inbox(self) -> str:
        """A subject under _INBOX. unique to this connection."""

    @abc.abstractmethod
    async def flush(self, timeout: float = 5.0) -> None:
        """Returns once the server has processed everything sent before (PING/PONG)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Closes the connection."""

    @abc.abstractmethod
    def lost(self) -> asyncio.Future:
        """A future that completes (with the reason) when the connection is gone."""
