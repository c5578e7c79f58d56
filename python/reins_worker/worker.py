"""The worker: serves the tasks of handlers registered by name, as the Go SDK (package worker)
does, speaking protocol version 1 (docs/protocol.md).

A handler is an async function of a TaskContext. It answers with continue_, complete, wait,
fail or fail_permanent (the first answer counts), keeps state across iterations with
checkpoint, append_checkpoint and load_checkpoint, runs side effects once with effect, and may
report usage and heartbeats. Returning without an answer completes with null; raising fails
the attempt (retryable).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import time
from collections import OrderedDict
from typing import Any, Awaitable, Callable, Optional

from . import protocol as p
from .effects import Effects, LeaseLost, NotRecorded, Values
from .jetstream import KV, JetStream, JetStreamError, ObjectStore, api_prefix
from .natsclient import NATSConnection
from .transport import Transport, TransportError

Handler = Callable[["TaskContext"], Awaitable[Any]]

DEFAULT_ACK_WAIT = 5.0
DEFAULT_CONCURRENCY = 64
PULL_EXPIRY = 5.0
MAX_REMEMBERED = 10_000

log = logging.getLogger("reins_worker")


class AnsweredError(Exception):
    """An answer or checkpoint write after the task was answered (only the first counts)."""


class CheckpointTooLarge(Exception):
    """A checkpoint write larger than a value may be (64 MiB)."""


class _Bounded:
    """A bounded map of the last keys added."""

    def __init__(self, n: int = MAX_REMEMBERED):
        self.n, self.d = n, OrderedDict()

    def add(self, k: str, v: Any = True) -> None:
        self.d[k] = v
        self.d.move_to_end(k)
        while len(self.d) > self.n:
            self.d.popitem(last=False)

    def get(self, k: str) -> Any:
        return self.d.get(k)

    def pop(self, k: str) -> Any:
        return self.d.pop(k, None)


def _nonce() -> str:
    def b36(n: int) -> str:
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"
        out = ""
        while True:
            n, r = divmod(n, 36)
            out = digits[r] + out
            if n == 0:
                return out

    return b36(time.time_ns()) + "-" + b36(random.getrandbits(32))


class TaskContext:
    """What a handler gets for one task. Its answering methods are coroutines."""

    def __init__(self, w: "Worker", handler: str, msg, t: p.Task, delivery: p.Delivery):
        self._w, self.handler, self._msg, self.task = w, handler, msg, t
        self._delivery = delivery
        self._state = "open"  # open, answering, done
        self._finished = asyncio.Event()
        self._usage: dict = {}
        self._ck_lock = asyncio.Lock()
        self._ck_resolved = False
        self._ck_value: Any = p.NOTHING
        self._ck_n = 0
        self._scope = p.checkpoint_scope(t.run_id, t.step, t.item, t.activation)
        self._may_follow = t.attempt > 1 or delivery.num_delivered > 1
        self._handler_task: Optional[asyncio.Task] = None
        #: Why the handler was stopped ("timeout", "run ended", "worker stopping"), or "".
        self.cause = ""

    # The task.
    @property
    def input(self) -> Any:
        """The step's input, or the output of the previous iteration (whole, never a reference)."""
        return self.task.input

    @property
    def run_id(self) -> str:
        return self.task.run_id

    @property
    def step(self) -> str:
        return self.task.step

    @property
    def item(self) -> int:
        return self.task.item

    @property
    def activation(self) -> int:
        return self.task.activation

    @property
    def iteration(self) -> int:
        return self.task.iteration

    @property
    def attempt(self) -> int:
        return self.task.attempt

    # Answers.
    async def continue_(self, output: Any) -> None:
        """Asks for another iteration (agent_loop, agent) whose input is output."""
        await self._answer("continued", output)

    async def complete(self, output: Any = None, *, label: str = "", stop_reason: str = "", stop_detail: str = "") -> None:
        """Ends the task with output, and maybe a label that picks the step's edges and why an
        agent or agent_loop stopped."""
        await self._answer("completed", output, label=label, stop_reason=stop_reason, stop_detail=stop_detail)

    async def wait(self, pending: list[dict]) -> None:
        """Answers that the iteration stopped on tool calls waiting for a human decision
        ({"call_id", "tool", "arguments"[, "child"]}); the engine dispatches it again, with
        task.resume and task.decisions, once every call is decided."""
        if not pending:
            raise ValueError(f"wait of task {self.task.msg_id}: no pending call: a task waits for decisions on one call or more")

        async def answer() -> None:
            calls = []
            for c in pending:
                c = dict(c)
                c["arguments"] = await self._w.values.out(self.run_id, c.get("arguments"))
                calls.append(c)
            await self._deliver_checked("waiting", pending=calls)

        await self._answering(answer)

    async def fail(self, error: Any) -> None:
        """Fails the attempt; the step's retry policy applies."""
        await self._answering(lambda: self._deliver(self._event("failed", error=_error_text(error))))

    async def fail_permanent(self, error: Any) -> None:
        """Fails the attempt and the step: retrying cannot help."""
        await self._answering(lambda: self._deliver(self._event("failed", error=_error_text(error), permanent=True)))

    def add_usage(self, usage: Optional[dict] = None, **kw: float) -> None:
        """Adds to what the answer reports: model_calls, tool_calls, input_tokens,
        output_tokens, cost_usd."""
        p.add_usage(self._usage, dict(usage or {}, **kw))

    async def heartbeat(self) -> None:
        """Tells JetStream the task is still being worked on (the worker also does it every
        ack wait / 3); once the task is answered it does nothing."""
        if self._state == "open":
            await self._w.nc.publish(self._msg.reply, b"+WPI")

    # Checkpoints.
    async def checkpoint(self, value: Any) -> None:
        """Replaces the checkpoint with value."""
        raw = p.encode(value)
        async with self._ck_lock:
            await self._ck_ready()
            await self._ck_put(b'{"set":' + raw + b"}")
            self._ck_value = json.loads(raw)

    async def append_checkpoint(self, *items: Any) -> None:
        """Appends items to the checkpoint, which must be a JSON array or nothing; it writes
        bytes in proportion to the items, not to the history."""
        if not items:
            return
        raws = [p.encode(it) for it in items]
        async with self._ck_lock:
            await self._ck_ready()
            if not p.appendable(self._ck_value):
                raise TypeError(f"checkpoint of task {self.task.msg_id}: cannot append to a value that is not a JSON array")
            await self._ck_put(b'{"append":[' + b",".join(raws) + b"]}")
            if not isinstance(self._ck_value, list):
                self._ck_value = []
            self._ck_value.extend(json.loads(r) for r in raws)  # in place: cost ∝ the items

    async def load_checkpoint(self) -> Any:
        """The checkpoint as of the earlier iterations and this attempt's writes; None when
        there is none. The value is the worker's own copy, handed out without copying (as the
        Go SDK's): read it, copy it before changing it, and load it again after a write."""
        async with self._ck_lock:
            await self._ck_ready()
            return None if self._ck_value is p.NOTHING else self._ck_value

    # Side effects.
    async def effect(self, key: str, fn: Callable[[str], Awaitable[Any]]) -> Any:
        """Runs fn(idempotency_key), a side effect, once for key in this iteration of the step,
        across its attempts and redeliveries, and returns its result (as JSON reads it back).
        An attempt that finds the result recorded returns it without running fn; one that
        finds another running it waits. When a holder is lost (killed, or paused past its
        lease), fn runs again with the same key: pass it to the system it changes. An exception
        from fn means the effect did not happen: nothing is recorded, and it propagates."""
        ident = p.effect_id(self.task, key)
        return await self._w.effects.once(ident, self._w.effects.lease_for(self.task), lambda: fn(ident))

    # What the worker does for the task.
    def _event(self, typ: str, **kw: Any) -> dict:
        return p.answer(self.task, typ, self._w.now_ns(), usage=self._usage, **kw)

    def _begin(self) -> None:
        if self._state != "open":
            raise AnsweredError(f"the task {self.task.msg_id} is already answered" + (f" ({self.cause})" if self.cause else ""))
        self._state = "answering"

    async def _answering(self, answer: Callable[[], Awaitable[None]]) -> None:
        """Claims the right to answer, then answers in a task of its own that the handler's
        cancellation does not interrupt: an answer once begun is finished. An answer that
        fails without being published hands the task back to JetStream (it runs again)."""
        self._begin()

        async def guarded() -> None:
            try:
                await answer()
            except BaseException:
                if self._state != "done":
                    self._ck_keep(False)
                    try:
                        await self._w.nc.publish(self._msg.reply, b"-NAK")
                    except Exception:
                        pass
                    self._finish()
                raise

        await asyncio.shield(asyncio.ensure_future(guarded()))

    async def _answer(self, typ: str, output: Any, **kw: Any) -> None:
        async def answer() -> None:
            try:
                p.encode(output)
            except (TypeError, ValueError) as e:
                await self._deliver_problem(f"the output of step {p.step_key(self.step, self.item)} cannot be encoded as JSON: {e}", True)
                raise
            nonce = _nonce() if typ == "continued" else ""
            try:
                out = await self._w.values.out(self.run_id, output)
            except (JetStreamError, TransportError, OSError) as e:
                await self._deliver_problem(f"the answer to step {p.step_key(self.step, self.item)} cannot be stored: {e}", False)
                raise
            await self._deliver_checked(typ, output=out, nonce=nonce, **kw)

        await self._answering(answer)

    async def _deliver_checked(self, typ: str, **kw: Any) -> None:
        ev = self._event(typ, **kw)
        data = p.encode(ev)
        limit = self._w.nc.max_payload
        size = len(data) + len("NATS/1.0\r\nNats-Msg-Id: \r\n\r\n") + len(p.answer_msg_id(self.task, typ, ev.get("nonce", "")))
        if size > limit:
            problem = f"the answer to step {p.step_key(self.step, self.item)} is {size} bytes, more than the message limit of {limit} bytes"
            await self._deliver_problem(problem, True)
            raise ValueError(problem)
        await self._deliver(ev, data)

    async def _deliver_problem(self, problem: str, permanent: bool) -> None:
        log.warning("the answer fails the attempt: %s", problem)
        await self._deliver(self._event("failed", error=problem, permanent=permanent))

    async def _deliver(self, ev: dict, data: Optional[bytes] = None) -> None:
        """Publishes the answer, waits for JetStream to store it, then acknowledges the task."""
        await self._w._deliver(self, ev, data)

    def _ck_keep(self, continued: bool) -> None:
        """Keeps the value as of the end of this iteration for the next one, when it continued
        (the worker may run it too); any other answer drops it. As the Go SDK's cache."""
        cache, t = self._w._ck_cache, self.task
        if not continued:
            cache.pop(self._scope)
        elif self._ck_resolved:
            cache.add(self._scope, (t.iteration, self._ck_value))
        elif t.resume > 0 or self._may_follow:  # this iteration has writes the cache lacks
            cache.pop(self._scope)
        elif t.iteration == 1:
            cache.add(self._scope, (1, p.NOTHING))
        else:  # nothing written in this iteration: the previous value holds
            kept = cache.get(self._scope)
            if kept is not None and kept[0] == t.iteration - 1:
                cache.add(self._scope, (t.iteration, kept[1]))
            else:
                cache.pop(self._scope)

    def _finish(self) -> None:
        self._state = "done"
        self._finished.set()

    async def _claim(self, cause: str) -> bool:
        """The worker's right to answer (timeout, end of run, stop): False when the handler
        answered; when its answer is in flight, waits for it."""
        if self._state == "open":
            self._state, self.cause = "answering", cause
            return True
        if self._state == "answering":
            await self._finished.wait()
        return False

    async def _ck_ready(self) -> None:
        if self._state != "open":
            raise AnsweredError(f"checkpoint of task {self.task.msg_id}: the task is already answered")
        if not self._ck_resolved:
            await self._ck_resolve()
            self._ck_resolved = True

    async def _ck_resolve(self) -> None:
        t, kv = self.task, self._w.checkpoints
        if t.resume > 0:
            self._w._ck_cache.pop(self._scope)
            self._w.ck_reloads += 1
            self._ck_value, self._ck_n = await self._fold(
                lambda w: w.iteration < t.iteration or (w.iteration == t.iteration and w.resume <= t.resume),
                (t.iteration, t.resume))
            return
        if self._may_follow:
            # The writes of another attempt of this iteration do not count.
            for key in await kv.entries(f"{self._scope}.{t.iteration}.*", headers_only=True):
                await kv.purge(key)
        cache = self._w._ck_cache
        if t.iteration <= 1:
            cache.pop(self._scope)
            return
        kept = cache.pop(self._scope)
        if kept is not None and kept[0] == t.iteration - 1:
            # This worker continued the previous iteration: its value as of then.
            self._ck_value = kept[1]
            return
        self._w.ck_reloads += 1
        self._ck_value, _ = await self._fold(lambda w: w.iteration < t.iteration, None)

    async def _fold(self, include: Callable[[p.CheckpointWrite], bool], own: Optional[tuple]) -> tuple[Any, int]:
        entries = await self._w.checkpoints.entries(self._scope + ".>")
        es, nxt = [], 0
        for key, e in entries.items():
            try:
                w = p.parse_checkpoint_key(key)
            except p.ProtocolError:
                continue
            if not include(w):
                continue
            if own and (w.iteration, w.resume) == own:
                nxt = max(nxt, w.n + 1)
            es.append((w, e.value))
        es.sort(key=lambda x: x[0])
        decoded: list = []
        for w, raw in reversed(es):  # back to the last set: what comes before it is not read
            d = await self._w.values.in_(self.run_id, json.loads(raw))
            decoded.insert(0, (w, d))
            if isinstance(d, dict) and "set" in d:
                break
        return p.fold(decoded), nxt

    async def _ck_put(self, value: bytes) -> None:
        key = p.CheckpointWrite(self.task.iteration, self.task.resume, self._ck_n, self._scope).key()
        if len(value) > p.MAX_VALUE:
            raise CheckpointTooLarge(f"checkpoint of task {self.task.msg_id}: the write is {len(value)} bytes, more than the {p.MAX_VALUE} bytes one may be")
        value = await self._w.values.out_raw(self.run_id, value)
        await self._w.checkpoints.put(key, value)
        self._ck_n += 1


def _error_text(error: Any) -> str:
    if error is None or error == "":
        return "the handler failed without saying why"
    return p.clip(str(error) if not isinstance(error, BaseException) or str(error) else type(error).__name__)


class Worker:
    """Serves the tasks of the handlers registered with handle.

    Give a transport (anything implementing transport.Transport, such as a nats-py adapter),
    or a url and credentials for the built-in client. namespace is the deployment's
    (docs/protocol.md); js_domain or js_api_prefix say where its JetStream is.
    """

    def __init__(self, url: str = "", *, token: str = "", user: str = "", password: str = "", namespace: str = "",
                 js_domain: str = "", js_api_prefix: str = "", ack_wait: float = DEFAULT_ACK_WAIT,
                 concurrency: int = DEFAULT_CONCURRENCY, name: str = "reins-worker-py",
                 transport: Optional[Transport] = None, now_ns: Callable[[], int] = time.time_ns):
        if ack_wait <= 0:
            raise ValueError(f"ack_wait is {ack_wait}: want more than 0 seconds")
        if concurrency < 1:
            raise ValueError(f"concurrency is {concurrency}: want 1 or more")
        self.url, self._auth, self.name = url, {"token": token, "user": user, "password": password}, name
        self.names = p.Names(namespace)
        self.api = api_prefix(js_domain, js_api_prefix)
        self.ack_wait, self.concurrency, self.now_ns = ack_wait, concurrency, now_ns
        self.nc: Transport = transport  # type: ignore[assignment]
        self._handlers: dict[str, Handler] = {}
        self._running: dict[str, TaskContext] = {}  # by msg_id
        self._slots: dict[str, int] = {}
        self._slot_freed = asyncio.Event()
        self._answered = _Bounded()
        self._ended = _Bounded()  # run id -> when its end was announced (ns)
        self._ck_cache = _Bounded(1024)  # checkpoint scope -> (iteration, value): _ck_keep
        #: How many times a checkpoint was folded from the bucket (the cache missed).
        self.ck_reloads = 0
        self._started = False
        self._stopping = False
        #: How often run writes again what the worker serves (seconds).
        self.served_every = p.SERVED_EVERY
        #: Set once run consumes the tasks of every handler and listens for the ends of runs.
        self.ready = asyncio.Event()

    def handle(self, name: str, fn: Optional[Handler] = None):
        """Registers fn under name (also usable as a decorator: @worker.handle("name"))."""
        p.check_handler(name)
        if name in self._handlers:
            raise ValueError(f"handle({name!r}): a handler is already registered under this name")
        if self._started:
            raise RuntimeError(f"handle({name!r}) after run started: register every handler first")

        def register(f: Handler) -> Handler:
            if not inspect.iscoroutinefunction(f):
                raise TypeError(f"handle({name!r}): the handler must be an async function (async def)")
            self._handlers[name] = f
            return f

        return register(fn) if fn is not None else register

    async def run(self, stop: Optional[asyncio.Event] = None) -> None:
        """Connects, creates the consumer of every handler, listens for the ends of runs and
        serves tasks until stop is set (or the connection is lost: TransportError); then it
        hands the running tasks back to JetStream."""
        if self._started:
            raise RuntimeError("run called twice: a Worker runs once")
        if not self._handlers:
            raise RuntimeError("no handler registered: call handle first")
        self._started = True
        stop = stop or asyncio.Event()
        own = self.nc is None
        if own:
            self.nc = await NATSConnection.connect(self.url or "nats://127.0.0.1:4222", name=self.name, **self._auth)
        try:
            await self._serve(stop)
        finally:
            if own:
                await self.nc.close()

    async def _serve(self, stop: asyncio.Event) -> None:
        n = self.names
        self.js = JetStream(self.nc, self.api)
        try:
            await self.js.stream_info(n.tasks_stream())
        except JetStreamError as e:
            raise RuntimeError(f"the task stream {n.tasks_stream()} is not there ({e}): the engine creates the layout at start (reins serve), in the same namespace") from None
        self.checkpoints = KV(self.js, n.checkpoints_bucket())
        self.values = Values(ObjectStore(self.js, n.values_bucket()))
        self.effects = Effects(KV(self.js, n.effects_bucket()), self.values, self.ack_wait)
        cancels = await self.nc.subscribe(n.cancel_subjects())
        consumers = {}
        for h in sorted(self._handlers):
            consumers[h] = await self._consumer(h)
        await self.nc.flush()
        loops = [asyncio.ensure_future(self._cancel_loop(cancels)), asyncio.ensure_future(self._heartbeats())]
        loops += [asyncio.ensure_future(self._pull_loop(h, c)) for h, c in consumers.items()]
        served = KV(self.js, n.served_bucket())
        keys = p.served_keys(self._handlers, self.effects.id)
        if await self._announce(served, keys):
            loops.append(asyncio.ensure_future(self._announce_loop(served, keys)))
        self.ready.set()
        log.info("worker ready: %d handler(s)", len(consumers))
        stopped = asyncio.ensure_future(stop.wait())
        try:
            done, _ = await asyncio.wait([stopped, self.nc.lost(), *loops], return_when=asyncio.FIRST_COMPLETED)
            for f in done:
                if f is not stopped and f is not self.nc.lost() and f.exception():
                    raise f.exception()
            if self.nc.lost().done():
                raise TransportError(f"the connection to NATS was lost: {self.nc.lost().result()}")
        finally:
            self._stopping = True
            stopped.cancel()
            for f in loops:
                f.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self._hand_back()
            await self._unannounce(served, keys)

    async def _announce(self, served: KV, keys: list[str]) -> bool:
        """Writes the keys of what the worker serves (docs/protocol.md, "Announcing what a
        worker serves"), as the Go SDK does, so that a client submitting a run does not warn
        that nobody serves its handlers. A failure costs that warning only: it is logged."""
        try:
            for k in keys:
                await served.put(k, self.effects.id.encode())
        except (JetStreamError, TransportError) as e:
            log.warning("what the worker serves is not announced: clients will warn that nobody serves it: %s", e)
            return False
        return True

    async def _announce_loop(self, served: KV, keys: list[str]) -> None:
        """Writes the keys again every served_every, before the bucket lets them expire."""
        while True:
            await asyncio.sleep(self.served_every)
            try:
                for k in keys:
                    await served.put(k, self.effects.id.encode())
            except (JetStreamError, TransportError) as e:
                log.warning("what the worker serves was not announced again: %s", e)

    async def _unannounce(self, served: KV, keys: list[str]) -> None:
        """Removes the keys as the worker stops; on a lost connection they expire instead."""
        if self.nc.lost().done():
            return
        try:
            for k in keys:
                await asyncio.wait_for(served.delete(k), 1.0)
        except (JetStreamError, TransportError, asyncio.TimeoutError) as e:
            log.info("what the worker served is left to expire: %s", e)

    async def _consumer(self, handler: str) -> str:
        name = p.consumer_name(handler)
        cfg = {"durable_name": name, "description": "reins worker of handler " + handler,
               "filter_subject": self.names.task_subject(handler), "deliver_policy": "all", "ack_policy": "explicit",
               "ack_wait": int(self.ack_wait * 1e9), "max_ack_pending": 1 << 20, "max_deliver": -1,
               "replay_policy": "instant"}
        try:
            await self.js.create_consumer(self.names.tasks_stream(), name, cfg)
        except JetStreamError as e:
            raise RuntimeError(f"consumer {name} on {self.names.tasks_stream()}: {e}") from None
        return name

    async def _pull_loop(self, handler: str, consumer: str) -> None:
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox + ".*")
        subject = f"{self.api}.CONSUMER.MSG.NEXT.{self.names.tasks_stream()}.{consumer}"
        pulls = 0
        try:
            while True:
                while self.concurrency - self._slots.get(handler, 0) <= 0:
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
                batch = min(self.concurrency - self._slots.get(handler, 0), 256)
                pulls += 1
                reply = f"{inbox}.{pulls}"
                await self.nc.publish(subject, p.encode({"batch": batch, "expires": int(PULL_EXPIRY * 1e9)}), reply)
                got, deadline = 0, time.monotonic() + PULL_EXPIRY + 1
                while got < batch:
                    try:
                        msg = await sub.next(timeout=max(deadline - time.monotonic(), 0.001))
                    except asyncio.TimeoutError:
                        break
                    if msg.status:
                        if msg.status == "100":  # idle heartbeat
                            continue
                        if msg.subject == reply:  # 404, 408, 409: this pull ended
                            break
                        continue
                    got += 1
                    await self._receive(handler, msg)
        finally:
            await sub.unsubscribe()

    async def _receive(self, handler: str, msg) -> None:
        try:
            t = p.decode_task(msg.data)
        except p.ProtocolError as e:
            log.error("dropped a message that is not a task (handler %s, subject %s): %s", handler, msg.subject, e)
            await self.nc.publish(msg.reply, b"+TERM")
            return
        d = p.parse_ack_subject(msg.reply)
        if d.num_delivered > 1 and self._answered.get(t.msg_id):
            await self.nc.publish(msg.reply, b"+ACK")  # its answer is stored
            return
        if self._is_ended(t.run_id, d.timestamp_ns):
            await self.nc.publish(msg.reply, b"+ACK")
            return
        wait = t.not_before_ns - self.now_ns()
        if wait > 0:
            await self.nc.publish(msg.reply, b"-NAK " + p.encode({"delay": wait}))
            return
        if t.msg_id in self._running:
            # Delivered again while its first delivery still runs here: running both would let
            # this one discard the other's checkpoint writes.
            await self.nc.publish(msg.reply, b"-NAK " + p.encode({"delay": int(self.ack_wait * 1e9)}))
            return
        tc = TaskContext(self, handler, msg, t, d)
        self._running[t.msg_id] = tc
        self._slots[handler] = self._slots.get(handler, 0) + 1
        tc._handler_task = asyncio.ensure_future(self._serve_task(tc))

    def _is_ended(self, run_id: str, published_ns: int) -> bool:
        ids = [run_id]
        while "/" in ids[-1]:
            ids.append(ids[-1].rsplit("/", 1)[0])
        for r in ids:
            at = self._ended.get(r)
            if at is not None and (published_ns == 0 or published_ns < at):
                return True
        return False

    async def _serve_task(self, tc: TaskContext) -> None:
        t = tc.task
        try:
            timeout = t.timeout_ns / 1e9 if t.timeout_ns > 0 else None
            try:
                await asyncio.wait_for(self._call(tc), timeout)
            except asyncio.TimeoutError:
                if await tc._claim("timeout"):
                    log.warning("task %s timed out after %s", t.msg_id, p.go_duration(t.timeout_ns))
                    ev = tc._event("timed_out", error=f"the handler did not answer within {p.go_duration(t.timeout_ns)}")
                    await self._deliver(tc, ev, None)
            except asyncio.CancelledError:
                await self._settle_cancelled(tc)
        finally:
            self._running.pop(t.msg_id, None)
            self._slots[tc.handler] -= 1
            self._slot_freed.set()

    async def _call(self, tc: TaskContext) -> None:
        t = tc.task
        refusal = p.check_version(t)
        if refusal:
            # A task of a protocol version this worker does not speak would be misread:
            # refused for good, with both versions named (docs/protocol.md, "Versions").
            await tc.fail_permanent("worker: " + refusal)
            return
        try:
            t.input = await self.values.in_(t.run_id, t.input)
            t.human_input = await self.values.in_(t.run_id, t.human_input)
            for r in t.child_results:
                if "output" in r:
                    r["output"] = await self.values.in_(t.run_id, r["output"])
        except p.ValueError_ as e:
            await tc.fail_permanent(f"worker: the input of task {t.msg_id} cannot be read: {e}")
            return
        try:
            await self._handlers[tc.handler](tc)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the attempt fails, retryable
            if tc._state == "open":
                log.warning("handler %s failed on task %s: %r", tc.handler, t.msg_id, e)
                reason = e if isinstance(e, (LeaseLost, NotRecorded)) else f"handler {tc.handler} raised {type(e).__name__}: {e}"
                await tc.fail(reason)
            return
        if tc._state == "open":
            await tc.complete(None)

    async def _settle_cancelled(self, tc: TaskContext) -> None:
        cause = tc.cause or ("worker stopping" if self._stopping else "run ended")
        if not await tc._claim(cause):
            return
        tc._ck_keep(False)
        if cause == "run ended":
            await self.nc.publish(tc._msg.reply, b"+ACK")
        else:
            await self.nc.publish(tc._msg.reply, b"-NAK")
        tc._finish()

    async def _deliver(self, tc: TaskContext, ev: dict, data: Optional[bytes]) -> None:
        t = tc.task
        subject = self.names.event_subject(t.run_id)
        mid = p.answer_msg_id(t, ev["type"], ev.get("nonce", ""))
        tc._ck_keep(ev["type"] == "continued")
        try:
            await self.js.publish(subject, data if data is not None else p.encode(ev), {"Nats-Msg-Id": mid}, timeout=self.ack_wait)
        except (JetStreamError, TransportError) as e:
            tc._ck_keep(False)
            log.warning("an answer could not be published: the task goes back to JetStream: %s", e)
            try:
                await self.nc.publish(tc._msg.reply, b"-NAK")
            finally:
                tc._finish()
            raise TransportError(f"publish the {ev['type']} answer to task {t.msg_id}: {e}") from None
        self._answered.add(t.msg_id)
        # Not confirmed: the answer is stored, and a lost ack only brings the task back, which
        # this worker acknowledges without running and another finds stale.
        await self.nc.publish(tc._msg.reply, b"+ACK")
        tc._finish()

    async def _cancel_loop(self, sub) -> None:
        prefix = self.names.cancel_prefix()
        while True:
            msg = await sub.next()
            run = msg.subject[len(prefix):]
            if not run:
                continue
            self._ended.add(run, self.now_ns())
            for tc in list(self._running.values()):
                # Only handlers that have not answered: one that answered finishes its work.
                if (tc.run_id == run or tc.run_id.startswith(run + "/")) and tc._handler_task and tc._state == "open":
                    tc.cause = tc.cause or "run ended"
                    tc._handler_task.cancel()

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            for tc in list(self._running.values()):
                if tc._state == "open":
                    try:
                        await self.nc.publish(tc._msg.reply, b"+WPI")
                    except TransportError:
                        pass

    async def _hand_back(self) -> None:
        """Cancels the handlers that have not answered (their tasks go back to JetStream) and
        waits for every task, answers in flight included, to settle."""
        tasks = [tc._handler_task for tc in self._running.values() if tc._handler_task]
        for tc in list(self._running.values()):
            if tc._state == "open" and tc._handler_task:
                tc.cause = tc.cause or "worker stopping"
                tc._handler_task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self.nc.flush(1.0)
        except TransportError:
            pass

