"""The task and result protocol of reins, version 1 (docs/protocol.md), as pure functions.

Nothing here does I/O: names of subjects, streams and buckets in a namespace, the partition of
a run, message ids, the answer's body, checkpoint scopes, keys and their fold, effect keys and
records, references to stored values, Go's duration and time formats. The worker (worker.py)
does the I/O through a transport (transport.py); the unit tests hold these functions to what
the Go code writes.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

#: The protocol version this package speaks (Go: protocol.Version).
VERSION = 1

#: Values whose JSON is larger than this travel by reference (wire.DefaultInlineMax).
INLINE_MAX = 64 << 10
#: The largest value read back, and the largest checkpoint write (wire.DefaultMaxValue).
MAX_VALUE = 64 << 20
#: Errors and stop details are clipped to this many bytes (worker.maxErrorLen).
MAX_ERROR_LEN = 16 << 10
#: The number of event partitions (natsbox.Partitions).
PARTITIONS = 16
#: Durable consumers of handlers start with it (worker.ConsumerPrefix).
CONSUMER_PREFIX = "reins-worker-"
#: The handler of the task stream's keeper message, which no worker consumes.
KEEPER_HANDLER = "reins-keep"

REF_PREFIX = "\x00reins-value:"

_NAMESPACE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
# What a KV key can hold of a served name (worker.servedName).
_SERVED_NAME = re.compile(r"^[-/_=.a-zA-Z0-9]+$")
# How often a worker writes what it serves (natsbox.ServedEvery; the bucket keeps a write 60 s).
SERVED_EVERY = 20.0


class ProtocolError(Exception):
    """A message that does not follow the protocol (a malformed task, key or reference)."""


class ValueError_(ProtocolError):
    """A value stored by reference that can never be read (wire.ErrValue): a bad reference,
    another run's, too large, missing, or not the value it names."""


# --- names -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Names:
    """The names of a namespace (natsbox.Names): subjects prefixed by ``NS.``, streams,
    buckets and the object store by ``NS_``; nothing in the default namespace ("")."""

    namespace: str = ""

    def __post_init__(self) -> None:
        if self.namespace and not _NAMESPACE.match(self.namespace):
            raise ValueError(
                f"namespace {self.namespace!r}: want 1 to 32 characters of a-z 0-9 _ -, "
                "beginning with a letter or a digit"
            )

    @property
    def subject(self) -> str:
        return self.namespace + "." if self.namespace else ""

    @property
    def name(self) -> str:
        return self.namespace + "_" if self.namespace else ""

    def tasks_stream(self) -> str:
        return self.name + "REINS_TASKS"

    def checkpoints_bucket(self) -> str:
        return self.name + "reins_checkpoints"

    def effects_bucket(self) -> str:
        return self.name + "reins_effects"

    def values_bucket(self) -> str:
        return self.name + "reins_values"

    def served_bucket(self) -> str:
        return self.name + "reins_served"

    def task_subject(self, handler: str) -> str:
        check_handler(handler)
        return self.subject + "reins.task." + handler

    def cancel_subjects(self) -> str:
        return self.subject + "reins.cancel.>"

    def cancel_prefix(self) -> str:
        return self.subject + "reins.cancel."

    def event_subject(self, run_id: str) -> str:
        check_token("run id", run_id)
        return f"{self.subject}reins.event.{partition(run_id):02d}.{run_id}"

    def delta_subject(self, run_id: str) -> str:
        check_token("run id", run_id)
        return self.subject + "reins.delta." + run_id


def partition(run_id: str) -> int:
    """The run's partition: FNV-1a 32 of the run id's bytes modulo 16 (natsbox.Partition)."""
    h = 2166136261
    for b in run_id.encode():
        h ^= b
        h = (h * 16777619) & 0xFFFFFFFF
    return h % PARTITIONS


def check_token(what: str, s: str) -> None:
    if not s or any(c in s for c in ".*> \t\r\n") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in s):
        raise ValueError(f"{what} {s!r} is not a NATS subject token (no '.', '*', '>', white space or control characters)")


def check_handler(name: str) -> None:
    """A handler name: subject tokens separated by dots, without '/' or '\\', not the keeper's."""
    if not name:
        raise ValueError("handler name is empty")
    for tok in name.split("."):
        check_token(f"handler name {name!r}: token", tok)
    if "/" in name or "\\" in name:
        raise ValueError(f"handler name {name!r} has '/' or '\\', which a consumer name cannot hold")
    if name == KEEPER_HANDLER:
        raise ValueError(f"handler name {name!r} is reserved: it holds the task stream's keeper message")


def consumer_name(handler: str) -> str:
    """The durable consumer of a handler: '_' written '__' and '.' written '_d'."""
    return CONSUMER_PREFIX + handler.replace("_", "__").replace(".", "_d")


def served_keys(handlers: Iterable[str], worker_id: str) -> list[str]:
    """The keys under which a worker announces its handlers in the served bucket,
    handler.NAME.WORKERID, sorted (worker.servedKeys); a name a KV key cannot hold (a handler
    name may have characters a key may not) is left out, as the Go SDK leaves it out."""
    return sorted(f"handler.{h}.{worker_id}" for h in handlers if _SERVED_NAME.match(h))


# --- tasks -------------------------------------------------------------------------------


@dataclass
class Task:
    """A task's body (docs/protocol.md, "The task message"). Unknown members are ignored."""

    run_id: str
    step: str
    item: int
    handler: str
    msg_id: str
    activation: int
    iteration: int
    attempt: int
    input: Any = None
    type: str = ""
    body: str = ""
    workflow: str = ""
    model: str = ""
    prompt: str = ""
    instructions: str = ""
    goal: str = ""
    session: str = ""
    started_by: str = ""
    not_before_ns: int = 0
    timeout_ns: int = 0
    resume: int = 0
    decisions: list = field(default_factory=list)
    human_input: Any = None
    child_results: list = field(default_factory=list)
    protocol: int = 0


def decode_task(data: bytes) -> Task:
    """Decodes a task message's body, or raises ProtocolError (the worker terminates it)."""
    try:
        d = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"task: malformed message: {e}") from None
    if not isinstance(d, dict):
        raise ProtocolError("task: malformed message: not a JSON object")

    def s(k: str) -> str:
        v = d.get(k, "")
        if v is None:
            return ""
        if not isinstance(v, str):
            raise ProtocolError(f"task: malformed message: {k} is not a string")
        return v

    def n(k: str, default: int = 0) -> int:
        v = d.get(k, default)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise ProtocolError(f"task: malformed message: {k} is not an integer")
        return v

    t = Task(
        run_id=s("run_id"), step=s("step"), item=n("item", -1), handler=s("handler"), msg_id=s("msg_id"),
        activation=n("activation"), iteration=n("iteration"), attempt=n("attempt"), input=d.get("input"),
        type=s("type"), body=s("body"), workflow=s("workflow"), model=s("model"), prompt=s("prompt"),
        instructions=s("instructions"), goal=s("goal"), session=s("session"), started_by=s("started_by"), timeout_ns=n("timeout"), resume=n("resume"),
        decisions=d.get("decisions") or [], human_input=d.get("human_input"),
        child_results=d.get("child_results") or [], protocol=n("protocol"),
    )
    if d.get("not_before"):
        t.not_before_ns = parse_time_ns(s("not_before"))
    if not t.run_id:
        raise ProtocolError("task: malformed message: no run_id")
    if not t.step:
        raise ProtocolError(f"task {t.run_id}: malformed message: no step")
    if not t.msg_id:
        raise ProtocolError(f"task {t.run_id}/{t.step}: malformed message: no msg_id")
    if t.activation < 1 or t.iteration < 1 or t.attempt < 1:
        raise ProtocolError(f"task {t.msg_id}: malformed message: activation, iteration and attempt must be 1 or more")
    return t


def version_of(v: int) -> int:
    """A task without a version (0) is of version 1."""
    return v if v else 1


def check_version(t: Task) -> Optional[str]:
    """The sentence refusing a task of a version this worker does not speak, or None
    (protocol.CheckVersion)."""
    v = version_of(t.protocol)
    if v == VERSION:
        return None
    if v > VERSION:
        fix = "upgrade the worker (workers are upgraded before engines)"
    else:
        fix = "the engine is older than any version this worker speaks: upgrade the engine"
    return f"task {t.msg_id} speaks reins protocol version {v}, and this worker speaks version {VERSION}: {fix}"


def step_key(step: str, item: int) -> str:
    return f"{step}#{item}" if item >= 0 else step


# --- answers -----------------------------------------------------------------------------

ANSWER_TYPES = ("continued", "completed", "waiting", "failed", "timed_out")


def answer(t: Task, typ: str, at_ns: int, *, output: Any = None, has_output: bool = False, label: str = "",
           stop_reason: str = "", stop_detail: str = "", error: str = "", permanent: bool = False,
           pending: Optional[list] = None, usage: Optional[dict] = None, nonce: str = "") -> dict:
    """The body of an answer to t (wire.Answer), as Go's encoder writes it: empty members left
    out, except item, and output for continued and completed."""
    if typ not in ANSWER_TYPES:
        raise ValueError(f"answer type {typ!r}: want one of {', '.join(ANSWER_TYPES)}")
    ev: dict = {"run_id": t.run_id, "type": typ, "at": format_time_ns(at_ns), "step": t.step, "item": t.item,
                "activation": t.activation, "iteration": t.iteration, "attempt": t.attempt}
    if has_output or typ in ("continued", "completed"):
        ev["output"] = output
    if label:
        ev["label"] = label
    if stop_reason:
        ev["stop_reason"] = stop_reason
    if stop_detail:
        ev["stop_detail"] = clip(stop_detail)
    if error:
        ev["error"] = clip(error)
    if usage:
        u = {k: v for k, v in usage.items() if v}
        if u:
            ev["usage"] = u
    if permanent:
        ev["permanent"] = True
    if t.resume > 0:
        ev["resume"] = t.resume
    if pending:
        ev["pending"] = pending
    if nonce:
        ev["nonce"] = nonce
    ev["protocol"] = VERSION
    return ev


def answer_msg_id(t: Task, typ: str, nonce: str = "") -> str:
    """The answer's Nats-Msg-Id: TASKMSGID/TYPE, or TASKMSGID/continued/NONCE (wire.EventMsgID)."""
    mid = f"{t.run_id}/{step_key(t.step, t.item)}/{t.activation}/{t.iteration}/{t.attempt}"
    if t.resume > 0:
        mid += f"/r{t.resume}"
    mid += "/" + typ
    if nonce:
        mid += "/" + nonce
    return mid


def clip(s: str) -> str:
    """Bounds a sentence at MAX_ERROR_LEN bytes, ending with '…' when clipped."""
    b = s.encode()
    if len(b) <= MAX_ERROR_LEN:
        return s
    return b[:MAX_ERROR_LEN].decode(errors="ignore") + "…"


def encode(v: Any) -> bytes:
    """Compact JSON, UTF-8, as Go writes it (no spaces); NaN and infinities are refused."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


USAGE_KEYS = ("model_calls", "tool_calls", "input_tokens", "output_tokens", "cost_usd")


def add_usage(total: dict, u: dict) -> None:
    for k, v in u.items():
        if k not in USAGE_KEYS:
            raise ValueError(f"usage member {k!r}: want one of {', '.join(USAGE_KEYS)}")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ValueError(f"usage member {k!r} is {v!r}: want a number of 0 or more")
        total[k] = total.get(k, 0) + v


# --- time --------------------------------------------------------------------------------

_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$")


def format_time_ns(ns: int) -> str:
    """RFC 3339 in UTC with nanoseconds, trailing zeros trimmed, as Go's time.RFC3339Nano."""
    secs, frac = divmod(ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    if frac:
        base += "." + f"{frac:09d}".rstrip("0")
    return base + "Z"


def parse_time_ns(s: str) -> int:
    """Parses an RFC 3339 time (up to nanoseconds) to Unix nanoseconds."""
    m = _TIME.match(s)
    if not m:
        raise ProtocolError(f"time {s!r} is not RFC 3339")
    import calendar

    y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
    secs = calendar.timegm((y, mo, d, h, mi, sec, 0, 0, 0))
    if m.group(9):
        off = int(m.group(10)) * 3600 + int(m.group(11)) * 60
        secs -= off if m.group(9) == "+" else -off
    frac = m.group(7) or ""
    return secs * 1_000_000_000 + int(frac.ljust(9, "0") or 0)


def go_duration(ns: int) -> str:
    """A duration as Go's time.Duration.String prints it (30s, 1m30s, 1.5s, 250ms)."""
    if ns == 0:
        return "0s"
    neg, u = ns < 0, abs(ns)
    if u < 1_000_000_000:
        for unit, size in (("ns", 1), ("µs", 1_000), ("ms", 1_000_000)):
            if u < size * 1000:
                return ("-" if neg else "") + _frac(u, size) + unit
    h, rem = divmod(u, 3600 * 1_000_000_000)
    m, rem = divmod(rem, 60 * 1_000_000_000)
    out = ""
    if h:
        out += f"{h}h"
    if h or m:
        out += f"{m}m"
    out += _frac(rem, 1_000_000_000) + "s"
    return ("-" if neg else "") + out


def _frac(v: int, size: int) -> str:
    whole, frac = divmod(v, size)
    if not frac:
        return str(whole)
    digits = len(str(size)) - 1
    return f"{whole}." + f"{frac:0{digits}d}".rstrip("0")


# --- checkpoints -------------------------------------------------------------------------


def _kv_safe(s: str) -> str:
    return "".join(c if (c.isascii() and (c.isalnum() or c in "-_/=")) else "_" for c in s)


def checkpoint_scope(run_id: str, step: str, item: int, activation: int) -> str:
    """RUN/STEP[=ITEM]/ACTIVATION with characters a KV key may not hold written '_'."""
    key = step + (f"={item}" if item >= 0 else "")
    return f"{_kv_safe(run_id)}/{_kv_safe(key)}/{activation}"


@dataclass(frozen=True, order=True)
class CheckpointWrite:
    """One checkpoint write: folded in the order (iteration, resume, n)."""

    iteration: int
    resume: int
    n: int
    scope: str = field(default="", compare=False)

    def key(self) -> str:
        if self.resume > 0:
            return f"{self.scope}.{self.iteration}.r{self.resume}.{self.n}"
        return f"{self.scope}.{self.iteration}.{self.n}"


def _canonical_int(s: str) -> Optional[int]:
    if not s.isdigit() or not s.isascii() or str(int(s)) != s:
        return None
    return int(s)


def parse_checkpoint_key(key: str) -> CheckpointWrite:
    """Splits SCOPE.ITERATION.N or SCOPE.ITERATION.rRESUME.N (wire.ParseCheckpointWrite)."""
    parts = key.split(".")
    if len(parts) not in (3, 4) or not parts[0]:
        raise ProtocolError(f"checkpoint key {key!r}: want SCOPE.ITERATION.N or SCOPE.ITERATION.rRESUME.N")
    it, n = _canonical_int(parts[1]), _canonical_int(parts[-1])
    if it is None or n is None:
        raise ProtocolError(f"checkpoint key {key!r}: iteration and write number must be integers of 0 or more, without sign or leading zero")
    resume = 0
    if len(parts) == 4:
        r = _canonical_int(parts[2][1:]) if parts[2].startswith("r") else None
        if r is None or r < 1:
            raise ProtocolError(f"checkpoint key {key!r}: the resume must be r and an integer of 1 or more")
        resume = r
    return CheckpointWrite(it, resume, n, parts[0])


#: No checkpoint at all (distinct from a checkpoint of null).
NOTHING: Any = object()


def appendable(v: Any) -> bool:
    return v is NOTHING or v is None or isinstance(v, list)


def apply_write(value: Any, write: Any) -> Any:
    """Applies one decoded write ({"set": V} or {"append": [...]}) to value (NOTHING: nothing)."""
    if isinstance(write, dict) and "set" in write:
        return write["set"]
    if isinstance(write, dict) and "append" in write:
        items = write["append"]
        if items is None:
            items = []
        if not isinstance(items, list):
            raise ProtocolError("the checkpoint write is not valid: append holds no array")
        if not appendable(value):
            raise ProtocolError("an append follows a value that is not a JSON array")
        if not items:
            return value
        return (list(value) if isinstance(value, list) else []) + items
    raise ProtocolError("the checkpoint write is neither set nor append")


def fold(writes: Iterable[tuple[CheckpointWrite, Any]]) -> Any:
    """Folds decoded writes in the order (iteration, resume, n), starting at the last set.
    Returns NOTHING when there is no checkpoint. fold_start tells which writes a reader must
    read back at all."""
    es = sorted(writes, key=lambda e: e[0])
    value: Any = NOTHING
    for w, d in es[fold_start(es):]:
        try:
            value = apply_write(value, d)
        except ProtocolError as e:
            raise ProtocolError(f"{w.key()}: {e}") from None
    return value


def fold_start(sorted_writes: list) -> int:
    """The index of the last set among sorted decoded writes (0 when none): a set replaces
    everything before it."""
    for i in range(len(sorted_writes) - 1, -1, -1):
        d = sorted_writes[i][1]
        if isinstance(d, dict) and "set" in d:
            return i
    return 0


# --- effects -----------------------------------------------------------------------------


def effect_id(t: Task, key: str) -> str:
    """The idempotency key of a handler's effect: RUN/STEP/ITEM/ACTIVATION/ITERATION/KEY."""
    return f"{t.run_id}/{t.step}/{t.item}/{t.activation}/{t.iteration}/{key}"


def effect_key(ident: str) -> str:
    """The key of an effect in reins_effects: the hex SHA-256 of its id (wire.EffectKey)."""
    return hashlib.sha256(ident.encode()).hexdigest()


def claim_record(holder: str, until_ns: int) -> bytes:
    return encode({"holder": holder, "until": format_time_ns(until_ns)})


def result_record(value: Any) -> bytes:
    """A result; value is the effect's value, or the reference to it."""
    return encode({"done": True, "value": value})


def decode_effect(data: bytes) -> dict:
    """A record: {"holder", "until_ns"} for a claim, {"done": True, "value"} for a result (the
    value maybe a reference). A value that is neither is an older worker's result."""
    try:
        rec = json.loads(data)
    except ValueError:
        return {"done": True, "value": data.decode(errors="replace")}
    if not isinstance(rec, dict) or (not rec.get("done") and not rec.get("holder")):
        return {"done": True, "value": rec}
    if rec.get("done"):
        return {"done": True, "value": rec.get("value")}
    return {"holder": rec["holder"], "until_ns": parse_time_ns(rec.get("until", "1970-01-01T00:00:00Z"))}


# --- values by reference -----------------------------------------------------------------


def must_out(raw: bytes) -> bool:
    return raw.lstrip(b" \t\r\n").startswith(b'"\\u0000')


def value_name(run_id: str, data: bytes) -> str:
    return run_id + "/" + hashlib.sha256(data).hexdigest()


def make_ref(size: int, name: str) -> str:
    """The reference as a Python string (its JSON is "\\u0000reins-value:SIZE:NAME")."""
    return f"{REF_PREFIX}{size}:{name}"


def is_ref(v: Any) -> bool:
    return isinstance(v, str) and v.startswith(REF_PREFIX)


def parse_ref(v: str, run_id: str, max_size: int = MAX_VALUE) -> tuple[int, str]:
    """The size and object name of a reference of run run_id, or ValueError_."""
    body = v[len(REF_PREFIX):]
    sz, sep, name = body.partition(":")
    size = _canonical_int(sz)
    if not sep or size is None:
        raise ValueError_(f"a value stored by reference cannot be read: the reference {v[:80]!r} has no valid size")
    h = name[len(run_id) + 1:] if name.startswith(run_id + "/") else ""
    if len(h) != 64 or "/" in h or any(c not in "0123456789abcdef" for c in h):
        raise ValueError_(f"a value stored by reference cannot be read: the reference names {name!r}, not a value of run {run_id}")
    if size > max_size:
        raise ValueError_(f"a value stored by reference cannot be read: the value {name} is {size} bytes, more than the {max_size} bytes a value may be")
    return size, name


# --- JetStream acknowledgement subjects --------------------------------------------------


@dataclass
class Delivery:
    """What a JetStream message's reply subject says: how many times it was delivered and
    when the stream stored it."""

    num_delivered: int = 1
    stream_seq: int = 0
    timestamp_ns: int = 0


def parse_ack_subject(reply: str) -> Delivery:
    """$JS.ACK.STREAM.CONSUMER.DELIVERED.SSEQ.DSEQ.TS.PENDING, or the form with a domain and
    an account hash ($JS.ACK.DOMAIN.ACCHASH.STREAM.CONSUMER.DELIVERED.SSEQ.DSEQ.TS.PENDING[.RANDOM])."""
    toks = reply.split(".")
    if len(toks) < 9 or toks[0] != "$JS" or toks[1] != "ACK":
        return Delivery()
    off = 2 if len(toks) == 9 else 4
    try:
        return Delivery(int(toks[off + 2]), int(toks[off + 3]), int(toks[off + 5]))
    except (ValueError, IndexError):
        return Delivery()
