"""Unit tests of the protocol functions: each expected value is what the Go code writes (the
values were printed by internal/natsbox, internal/wire and protocol), so that the Python worker
and the Go SDK name, key and fold the same things the same way. The end-to-end tests against a
real server are in e2e/python_test.go, which also runs these."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from reins_worker import protocol as p  # noqa: E402
from reins_worker.natsclient import encode_headers, parse_headers  # noqa: E402
from reins_worker.jetstream import JetStream, api_prefix  # noqa: E402


def task(**kw):
    base = dict(run_id="r1", step="s", item=-1, handler="h", msg_id="r1/s/1/1/1", activation=1, iteration=1, attempt=1)
    base.update(kw)
    return p.Task(**base)


class Names(unittest.TestCase):
    def test_partition(self):
        for run, want in [("r1", 12), ("worker-crash", 9), ("run/step/1", 5), ("ü-x", 7)]:
            with self.subTest(run=run):
                self.assertEqual(p.partition(run), want)

    def test_namespace(self):
        cases = [
            ("", "reins.event.12.r1", "REINS_TASKS", "reins_checkpoints", "reins.cancel.>"),
            ("team-a", "team-a.reins.event.12.r1", "team-a_REINS_TASKS", "team-a_reins_checkpoints", "team-a.reins.cancel.>"),
        ]
        for ns, event, tasks, ck, cancel in cases:
            with self.subTest(ns=ns):
                n = p.Names(ns)
                self.assertEqual(n.event_subject("r1"), event)
                self.assertEqual(n.tasks_stream(), tasks)
                self.assertEqual(n.checkpoints_bucket(), ck)
                self.assertEqual(n.cancel_subjects(), cancel)
                self.assertEqual(n.task_subject("pay.charge"), n.subject + "reins.task.pay.charge")

    def test_served_keys(self):
        # worker.servedKeys: handler.NAME.WORKERID, sorted; a name a key cannot hold left out.
        self.assertEqual(p.served_keys(["pay.charge", "count", "ü"], "0a1b"), ["handler.count.0a1b", "handler.pay.charge.0a1b"])
        self.assertEqual(p.Names("team-a").served_bucket(), "team-a_reins_served")

    def test_bad_names(self):
        for bad in ["Team", "-a", "a.b", "x" * 33]:
            with self.subTest(namespace=bad), self.assertRaises(ValueError):
                p.Names(bad)
        for bad in ["", "a b", "a/b", "a.*", "reins-keep", "a..b"]:
            with self.subTest(handler=bad), self.assertRaises(ValueError):
                p.check_handler(bad)
        with self.assertRaises(ValueError):
            p.Names().event_subject("a.b")

    def test_consumer_name(self):
        self.assertEqual(p.consumer_name("payments.charge"), "reins-worker-payments_dcharge")
        self.assertEqual(p.consumer_name("a_b"), "reins-worker-a__b")

    def test_api_prefix(self):
        self.assertEqual(api_prefix(), "$JS.API")
        self.assertEqual(api_prefix(domain="hub"), "$JS.hub.API")
        self.assertEqual(api_prefix(prefix="JS.acc.API."), "JS.acc.API")
        with self.assertRaises(ValueError):
            api_prefix("hub", "JS.x")
        # KV writes go through a prefix other than the default, as the NATS clients send them.
        self.assertEqual(JetStream(None, "$JS.hub.API").write_subject("$KV.b.k"), "$JS.hub.API.$KV.b.k")
        self.assertEqual(JetStream(None).write_subject("$KV.b.k"), "$KV.b.k")


class Tasks(unittest.TestCase):
    def test_decode(self):
        t = p.decode_task(b'{"run_id":"r","step":"s","body":"s","type":"agent_loop","handler":"h","activation":1,'
                          b'"iteration":2,"attempt":1,"input":{"a":1},"msg_id":"r/s/1/2/1","timeout":30000000000,'
                          b'"not_before":"2023-11-14T22:13:20.1234567Z","unknown":true}')
        self.assertEqual((t.run_id, t.item, t.iteration, t.input, t.timeout_ns), ("r", -1, 2, {"a": 1}, 30_000_000_000))
        self.assertEqual(t.not_before_ns, 1700000000123456700)
        self.assertEqual(t.protocol, 0)

    def test_malformed(self):
        for body, want in [(b"nope", "malformed"), (b"[]", "not a JSON object"), (b'{"step":"s"}', "no run_id"),
                           (b'{"run_id":"r","msg_id":"m"}', "no step"), (b'{"run_id":"r","step":"s"}', "no msg_id"),
                           (b'{"run_id":"r","step":"s","msg_id":"m","activation":1,"iteration":0,"attempt":1}', "1 or more"),
                           (b'{"run_id":1}', "not a string")]:
            with self.subTest(body=body), self.assertRaises(p.ProtocolError) as cm:
                p.decode_task(body)
            self.assertIn(want, str(cm.exception))

    def test_versions(self):
        self.assertIsNone(p.check_version(task(protocol=0)))
        self.assertIsNone(p.check_version(task(protocol=1)))
        self.assertEqual(p.check_version(task(msg_id="newer/s/1/1/1", protocol=2)),
                         "task newer/s/1/1/1 speaks reins protocol version 2, and this worker speaks version 1: "
                         "upgrade the worker (workers are upgraded before engines)")
        self.assertIn("upgrade the engine", p.check_version(task(protocol=-1)))


class Answers(unittest.TestCase):
    def test_msg_ids(self):
        self.assertEqual(p.answer_msg_id(task(step="s", item=2, iteration=3, attempt=2, resume=4), "continued", "n"),
                         "r1/s#2/1/3/2/r4/continued/n")
        self.assertEqual(p.answer_msg_id(task(), "completed"), "r1/s/1/1/1/completed")

    def test_bodies(self):
        at = 1700000000123456700
        cases = [
            ("continued", dict(output={"i": 1}, nonce="n1"),
             {"type": "continued", "output": {"i": 1}, "nonce": "n1"}),
            ("completed", dict(output=None, label="ok", stop_reason="done"),
             {"type": "completed", "output": None, "label": "ok", "stop_reason": "done"}),
            ("failed", dict(error="boom", permanent=True, usage={"tool_calls": 1, "cost_usd": 0}),
             {"type": "failed", "error": "boom", "permanent": True, "usage": {"tool_calls": 1}}),
        ]
        for typ, kw, want in cases:
            with self.subTest(typ=typ):
                ev = p.answer(task(resume=2), typ, at, **kw)
                base = {"run_id": "r1", "at": "2023-11-14T22:13:20.1234567Z", "step": "s", "item": -1, "activation": 1,
                        "iteration": 1, "attempt": 1, "resume": 2, "protocol": 1}
                self.assertEqual(ev, dict(base, **want))
        with self.assertRaises(ValueError):
            p.answer(task(), "started", at)

    def test_clip(self):
        s = p.clip("é" * (p.MAX_ERROR_LEN))
        self.assertTrue(s.endswith("…"))
        self.assertLessEqual(len(s.encode()), p.MAX_ERROR_LEN + len("…".encode()))

    def test_usage(self):
        total = {}
        p.add_usage(total, {"model_calls": 1, "cost_usd": 0.5})
        p.add_usage(total, {"model_calls": 2})
        self.assertEqual(total, {"model_calls": 3, "cost_usd": 0.5})
        for bad in [{"tokens": 1}, {"model_calls": -1}, {"model_calls": "1"}]:
            with self.subTest(usage=bad), self.assertRaises(ValueError):
                p.add_usage({}, bad)


class Times(unittest.TestCase):
    def test_go_duration(self):
        for ns, want in [(0, "0s"), (1_500_000, "1.5ms"), (30_000_000_000, "30s"), (90_000_000_000, "1m30s"),
                         (1_500_000_000, "1.5s"), (7_200_003_000_000, "2h0m0.003s"), (999, "999ns"), (1_234_567, "1.234567ms")]:
            with self.subTest(ns=ns):
                self.assertEqual(p.go_duration(ns), want)

    def test_rfc3339(self):
        self.assertEqual(p.format_time_ns(1700000000123456700), "2023-11-14T22:13:20.1234567Z")
        self.assertEqual(p.format_time_ns(1700000000_000000000), "2023-11-14T22:13:20Z")
        for s, ns in [("2023-11-14T22:13:20.1234567Z", 1700000000123456700), ("2023-11-14T23:13:20+01:00", 1700000000_000000000)]:
            with self.subTest(s=s):
                self.assertEqual(p.parse_time_ns(s), ns)
        with self.assertRaises(p.ProtocolError):
            p.parse_time_ns("yesterday")


class Checkpoints(unittest.TestCase):
    def test_scope_and_keys(self):
        self.assertEqual(p.checkpoint_scope("run/a b", "st.ep", 3, 2), "run/a_b/st_ep=3/2")
        self.assertEqual(p.checkpoint_scope("r1", "loop", -1, 1), "r1/loop/1")
        for key, want in [("sc.2.0", (2, 0, 0)), ("sc.2.r3.1", (2, 3, 1))]:
            with self.subTest(key=key):
                w = p.parse_checkpoint_key(key)
                self.assertEqual((w.iteration, w.resume, w.n), want)
                self.assertEqual(w.key(), key)
        for bad in ["sc.1", "sc.01.0", "sc.1.-1", "sc.1.r0.0", "sc.1.x1.0", ".1.0", "sc.1.2.3.4"]:
            with self.subTest(bad=bad), self.assertRaises(p.ProtocolError):
                p.parse_checkpoint_key(bad)

    def test_fold(self):
        W = lambda i, n, r=0: p.CheckpointWrite(i, r, n, "sc")  # noqa: E731
        cases = [
            ("nothing", [], p.NOTHING),
            ("appends to nothing", [(W(1, 0), {"append": [1]}), (W(2, 0), {"append": [2, 3]})], [1, 2, 3]),
            ("a set resets", [(W(1, 0), {"append": [1]}), (W(2, 0), {"set": {"a": 1}}), (W(2, 1), {"set": [9]}),
                              (W(3, 0), {"append": [4]})], [9, 4]),
            ("resume after first", [(W(2, 0, 1), {"append": ["r"]}), (W(2, 0), {"append": ["f"]}), (W(1, 0), {"set": []})],
             ["f", "r"]),
            ("null and empty appends", [(W(1, 0), {"set": None}), (W(1, 1), {"append": None}), (W(1, 2), {"append": []})], None),
        ]
        for name, writes, want in cases:
            with self.subTest(name):
                self.assertEqual(p.fold(writes), want)
        with self.assertRaises(p.ProtocolError) as cm:
            p.fold([(W(1, 0), {"set": {"a": 1}}), (W(1, 1), {"append": [1]})])
        self.assertIn("sc.1.1", str(cm.exception))
        with self.assertRaises(p.ProtocolError):
            p.fold([(W(1, 0), {"put": 1})])

    def test_fold_start(self):
        W = lambda n: p.CheckpointWrite(1, 0, n, "sc")  # noqa: E731
        self.assertEqual(p.fold_start([(W(0), {"append": [1]}), (W(1), {"set": 2}), (W(2), {"append": [3]})]), 1)
        self.assertEqual(p.fold_start([(W(0), {"append": [1]})]), 0)


class Effects(unittest.TestCase):
    def test_key(self):
        t = task(run_id="r1", step="loop", iteration=3)
        ident = p.effect_id(t, "append")
        self.assertEqual(ident, "r1/loop/-1/1/3/append")
        self.assertEqual(p.effect_key(ident), "9cf9276a1bdfec943aab5207d69ec31cc1ee86e4e75e76ae282992c805066468")

    def test_records(self):
        claim = p.claim_record("m@w", 1700000000123456789)
        self.assertEqual(json.loads(claim), {"holder": "m@w", "until": "2023-11-14T22:13:20.123456789Z"})
        self.assertEqual(p.decode_effect(claim), {"holder": "m@w", "until_ns": 1700000000123456789})
        self.assertEqual(p.decode_effect(p.result_record({"x": 1})), {"done": True, "value": {"x": 1}})
        self.assertEqual(p.decode_effect(p.result_record(None)), {"done": True, "value": None})
        self.assertEqual(p.decode_effect(b'{"x":1}'), {"done": True, "value": {"x": 1}})  # an older worker's result
        self.assertEqual(p.decode_effect(b'"text"'), {"done": True, "value": "text"})


class Values(unittest.TestCase):
    def test_refs(self):
        data = b'"' + b"x" * 70000 + b'"'
        name = p.value_name("r1", data)
        ref = p.make_ref(len(data), name)
        self.assertTrue(p.is_ref(ref))
        self.assertEqual(p.encode(ref), b'"\\u0000reins-value:70002:' + name.encode() + b'"')
        self.assertEqual(p.parse_ref(ref, "r1"), (70002, name))
        for bad, why in [(p.make_ref(1, "r2/" + "a" * 64), "not a value of run r1"), (p.REF_PREFIX + "x:r1/a", "no valid size"),
                         (p.make_ref(1, "r1/" + "A" * 64), "not a value of run"), (p.make_ref(p.MAX_VALUE + 1, "r1/" + "a" * 64), "more than")]:
            with self.subTest(bad=bad), self.assertRaises(p.ValueError_) as cm:
                p.parse_ref(bad, "r1")
            self.assertIn(why, str(cm.exception))

    def test_must_out(self):
        self.assertTrue(p.must_out(p.encode("\x00short")))
        self.assertFalse(p.must_out(p.encode("short")))


class Wire(unittest.TestCase):
    def test_ack_subject(self):
        d = p.parse_ack_subject("$JS.ACK.REINS_TASKS.reins-worker-count.2.17.9.1700000000123456700.0")
        self.assertEqual((d.num_delivered, d.stream_seq, d.timestamp_ns), (2, 17, 1700000000123456700))
        d = p.parse_ack_subject("$JS.ACK.hub.ACCHASH.REINS_TASKS.c.3.5.4.1700000000123456700.0.rnd")
        self.assertEqual((d.num_delivered, d.stream_seq, d.timestamp_ns), (3, 5, 1700000000123456700))
        self.assertEqual(p.parse_ack_subject("_INBOX.x").num_delivered, 1)

    def test_headers(self):
        h, status, desc = parse_headers(b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n")
        self.assertEqual((status, desc, h), ("408", "Request Timeout", {"Nats-Pending-Messages": ["1"]}))
        h, status, _ = parse_headers(b"NATS/1.0\r\nA: 1\r\nA: 2\r\nKV-Operation: DEL\r\n\r\n")
        self.assertEqual((status, h), ("", {"A": ["1", "2"], "KV-Operation": ["DEL"]}))
        self.assertEqual(encode_headers({"Nats-Msg-Id": "r/s/1/1/1/completed"}), b"NATS/1.0\r\nNats-Msg-Id: r/s/1/1/1/completed\r\n\r\n")
        with self.assertRaises(ValueError):
            encode_headers({"A": "1\r\nB: 2"})


if __name__ == "__main__":
    unittest.main()
