"""Values by reference and side effects run once with leases (docs/protocol.md).

Values: a JSON value larger than 64 KiB, or a string starting with NUL, is stored in the
object store reins_values under RUN/SHA256 and replaced by a reference (wire.Values).

Effects: the Go SDK's Effects.Once (worker/effects.go). A claim {"holder", "until"} is created
on the effect's key; the holder renews it every lease/3 while the effect runs, records the
result {"done": true, "value"} on the claim's last revision, and releases the claim when the
effect fails. An attempt that finds a result returns it; one that finds a live claim waits for
it to change or run out; a claim that ran out is taken over on the revision read.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from . import protocol as p
from .jetstream import KV, JetStreamError, ObjectStore, WrongRevision
from .transport import TransportError


class Values:
    """Puts values out to the object store and takes them back, for one namespace."""

    def __init__(self, store: ObjectStore, inline: int = p.INLINE_MAX, max_size: int = p.MAX_VALUE):
        self.store, self.inline, self.max = store, inline, max_size
        self.known: set[str] = set()

    async def out_raw(self, run_id: str, raw: bytes) -> bytes:
        """raw, or the JSON of a reference to it once stored."""
        if len(raw) <= self.inline and not p.must_out(raw):
            return raw
        return p.encode(await self._put(run_id, raw))

    async def out(self, run_id: str, value: Any) -> Any:
        """value, or a reference to it (a str) once stored."""
        raw = p.encode(value)
        if len(raw) <= self.inline and not p.must_out(raw):
            return value
        return await self._put(run_id, raw)

    async def _put(self, run_id: str, raw: bytes) -> str:
        name = p.value_name(run_id, raw)
        if name not in self.known:
            info = await self.store.info(name)
            if info is None or int(info.get("size", -1)) != len(raw):
                await self.store.put(name, raw)
            self.known.add(name)
        return p.make_ref(len(raw), name)

    async def in_(self, run_id: str, value: Any) -> Any:
        """value, or the value a reference of run run_id names (protocol.ValueError_ when it can
        never be read)."""
        if not p.is_ref(value):
            return value
        size, name = p.parse_ref(value, run_id, self.max)
        try:
            data = await self.store.get(name, size)
        except ValueError as e:
            raise p.ValueError_(f"a value stored by reference cannot be read: {e}") from None
        if data is None:
            raise p.ValueError_(f"a value stored by reference cannot be read: the stored value {name} is missing")
        if len(data) != size or p.value_name(run_id, data) != name:
            raise p.ValueError_(f"a value stored by reference cannot be read: the object {name} is not the value its reference names")
        return json.loads(data)


class LeaseLost(Exception):
    """The holder lost its claim while the effect ran: it may not record its result."""


class NotRecorded(Exception):
    """The effect ran but its result could not be recorded."""


@dataclass
class Lease:
    """Who claims a side effect (holder) and for how long (seconds), for the values of run."""

    holder: str
    duration: float
    run: str


class Effects:
    """The record of side effects, KV reins_effects."""

    def __init__(self, kv: KV, values: Values, ack_wait: float):
        self.kv, self.values, self.ack_wait = kv, values, ack_wait
        self.id = secrets.token_hex(8)
        #: called with the key as an attempt starts waiting for a live claim (tests).
        self.waiting: Callable[[str], None] | None = None

    def lease_for(self, t: p.Task) -> Lease:
        """The task's timeout (the ack wait without one) plus the ack wait."""
        base = t.timeout_ns / 1e9 if t.timeout_ns > 0 else self.ack_wait
        return Lease(holder=f"{t.msg_id}@{self.id}", duration=base + self.ack_wait, run=t.run_id)

    def _claim_data(self, lease: Lease) -> bytes:
        return p.claim_record(lease.holder, time.time_ns() + int(lease.duration * 1e9))

    async def once(self, ident: str, lease: Lease, do: Callable[[], Awaitable[Any]]) -> Any:
        """Runs do, the effect ident, unless its result is recorded, and returns the result."""
        if lease.duration <= 0 or not lease.holder:
            raise ValueError(f"side effect {p.effect_key(ident)}: lease {lease}: want a holder and a duration over 0")
        key = p.effect_key(ident)
        while True:
            rev, done, value = await self._claim(key, lease)
            if done:
                return value
            if rev:
                return await self._run(key, rev, lease, do)

    async def _claim(self, key: str, lease: Lease) -> tuple[int, bool, Any]:
        try:
            return await self.kv.create(key, self._claim_data(lease)), False, None
        except WrongRevision:
            pass
        entry = await self.kv.get(key)
        if entry is None:  # released in between: claim again
            return 0, False, None
        rec = p.decode_effect(entry.value)
        if rec.get("done"):
            return 0, True, await self.values.in_(lease.run, rec["value"])
        if time.time_ns() >= rec["until_ns"]:
            # The holder is gone (or paused past its lease): take the claim over on the
            # revision read, so that of two attempts taking it over one wins.
            try:
                return await self.kv.update(key, self._claim_data(lease), entry.revision), False, None
            except WrongRevision:
                return 0, False, None
        if self.waiting:
            self.waiting(key)
        await self.kv.wait_change(key, entry.revision, (rec["until_ns"] - time.time_ns()) / 1e9)
        return 0, False, None

    async def _run(self, key: str, rev: int, lease: Lease, do: Callable[[], Awaitable[Any]]) -> Any:
        state = {"rev": rev, "lost": False}
        stop = asyncio.Event()

        async def renew() -> None:
            # Stopped between renewals, never during one: a renewal that landed moved the
            # revision the result is recorded on.
            while True:
                try:
                    await asyncio.wait_for(stop.wait(), lease.duration / 3)
                    return
                except asyncio.TimeoutError:
                    pass
                try:
                    state["rev"] = await self.kv.update(key, self._claim_data(lease), state["rev"])
                except WrongRevision:
                    state["lost"] = True
                    return
                except (JetStreamError, TransportError, OSError):
                    continue  # the next tick tries again

        renewal = asyncio.ensure_future(renew())

        async def end() -> None:
            stop.set()
            await asyncio.shield(renewal)

        try:
            value = await do()
        except BaseException:
            await end()
            if not state["lost"]:  # the effect did not happen: let the next attempt run it at once
                try:
                    await asyncio.shield(self.kv.delete(key, state["rev"]))
                except Exception:
                    pass
            raise
        await end()
        if state["lost"]:
            raise LeaseLost(f"side effect {key} ran, but the claim on the side effect was lost (its holder was paused or cut off longer than {lease.duration:g}s): the attempt fails and the result of the attempt that took it over counts")
        try:
            raw = p.encode(value)
        except (TypeError, ValueError) as e:
            raise NotRecorded(f"side effect {key} ran, but its result is not JSON ({e}), so the result of the side effect could not be recorded") from None
        try:
            stored = await self.values.out(lease.run, json.loads(raw))
            await asyncio.shield(self.kv.update(key, p.result_record(stored), state["rev"]))
        except WrongRevision:
            raise LeaseLost(f"side effect {key} ran, but the claim on the side effect was lost before its result was recorded: the attempt fails and the result of the attempt that took it over counts") from None
        except Exception as e:
            raise NotRecorded(f"side effect {key} ran, but the result of the side effect could not be recorded: {e}") from None
        return json.loads(raw)
