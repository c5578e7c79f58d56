"""Tests of the Worker's task lifecycle against a real nats-server with JetStream
(REINS_TEST_NATS_URL; e2e/python_test.go starts one), on the layout the engine would create,
made here in a namespace of each test's own. What the worker does is read where the server
sees it: its acknowledgements ($JS.ACK...: +ACK, -NAK, +WPI, +TERM) and its answers (the
events' subjects), by core subscriptions."""

import asyncio
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from reins_worker import AnsweredError, Worker  # noqa: E402
from reins_worker import protocol as p  # noqa: E402
from reins_worker.jetstream import KV, JetStream  # noqa: E402
from reins_worker.natsclient import NATSConnection, nuid  # noqa: E402

URL = os.environ.get("REINS_TEST_NATS_URL", "")
WAIT = 10  # seconds: a bound on what must come, never a pause


@unittest.skipUnless(URL, "REINS_TEST_NATS_URL names no NATS server (e2e/python_test.go runs these with one)")
class WorkerLive(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.nc = await NATSConnection.connect(URL)
        self.js = JetStream(self.nc)
        self.ns = "t" + nuid(10).lower()
        n = p.Names(self.ns)
        mem = {"storage": "memory", "num_replicas": 1}
        await self.js.request(f"STREAM.CREATE.{n.tasks_stream()}", dict(mem, name=n.tasks_stream(), subjects=[n.subject + "reins.task.>"], retention="workqueue"))
        await self.js.request(f"STREAM.CREATE.{n.name}REINS_EVENTS", dict(mem, name=n.name + "REINS_EVENTS", subjects=[n.subject + "reins.event.>"]))
        for b in (n.checkpoints_bucket(), n.effects_bucket()):
            await self.js.request(f"STREAM.CREATE.KV_{b}", dict(mem, name="KV_" + b, subjects=[f"$KV.{b}.>"], max_msgs_per_subject=1,
                                                               discard="new", allow_rollup_hdrs=True, deny_delete=True))
        v = n.values_bucket()
        await self.js.request(f"STREAM.CREATE.OBJ_{v}", dict(mem, name="OBJ_" + v, subjects=[f"$O.{v}.C.>", f"$O.{v}.M.>"], allow_rollup_hdrs=True))
        self.names = n
        self.acks = await self.nc.subscribe(f"$JS.ACK.{n.tasks_stream()}.>")
        self.events = await self.nc.subscribe(n.subject + "reins.event.>")
        self.stop = asyncio.Event()
        self.worker = Worker(URL, namespace=self.ns, ack_wait=0.3)
        self.release = asyncio.Event()
        self.seen: list = []

    async def start(self):
        self.run = asyncio.ensure_future(self.worker.run(self.stop))
        ready = asyncio.ensure_future(self.worker.ready.wait())
        await asyncio.wait([self.run, ready], timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
        if self.run.done():
            self.run.result()
        self.assertTrue(self.worker.ready.is_set())

    async def asyncTearDown(self):
        self.stop.set()
        if hasattr(self, "run"):
            await asyncio.wait_for(self.run, WAIT)
        await self.nc.close()

    async def publish(self, run: str, **kw):
        raw = kw.pop("raw", None)
        t = {"run_id": run, "step": "s", "item": -1, "body": "s", "type": "task", "handler": "h", "activation": 1,
             "iteration": 1, "attempt": 1, "input": {"x": 1}, "msg_id": f"{run}/s/1/1/1"}
        t.update(kw)
        body = raw or json.dumps(t).encode()
        await self.js.publish(self.names.subject + "reins.task.h", body, {"Nats-Msg-Id": t["msg_id"]})

    async def ack(self, want=None) -> bytes:
        """The next acknowledgement the worker sent (skipping +WPI unless want is +WPI)."""
        while True:
            m = await self.acks.next(timeout=WAIT)
            if want == b"+WPI" or m.data != b"+WPI":
                return m.data

    async def answer(self) -> dict:
        m = await self.events.next(timeout=WAIT)
        return json.loads(m.data)

    async def test_heartbeats_while_the_handler_works(self):
        @self.worker.handle("h")
        async def h(tc):
            await self.release.wait()
            await tc.complete("done")

        await self.start()
        await self.publish("beat")
        # Three in-progress beats (every ack wait / 3) while the handler has not answered.
        for _ in range(3):
            self.assertEqual(await self.ack(b"+WPI"), b"+WPI")
        self.release.set()
        a = await self.answer()
        self.assertEqual((a["type"], a["output"]), ("completed", "done"))
        self.assertEqual(await self.ack(), b"+ACK")

    async def test_settlements(self):
        @self.worker.handle("h")
        async def h(tc):
            self.seen.append(tc.run_id)
            if tc.run_id == "raises":
                raise RuntimeError("boom")
            if tc.run_id == "twice":
                await tc.continue_({"n": 1})
                with self.assertRaises(AnsweredError):
                    await tc.complete("again")
                self.seen.append("refused")
                return
            if tc.run_id == "usage":
                tc.add_usage(model_calls=1, input_tokens=10)
                tc.add_usage({"model_calls": 2, "cost_usd": 0.25})
                await tc.fail_permanent("no")
            # returns without answering

        await self.start()
        cases = [
            ("raises", {"type": "failed", "error": "handler h raised RuntimeError: boom"}),
            ("twice", {"type": "continued", "output": {"n": 1}}),
            ("usage", {"type": "failed", "error": "no", "permanent": True,
                       "usage": {"model_calls": 3, "input_tokens": 10, "cost_usd": 0.25}}),
            ("silent", {"type": "completed", "output": None}),
        ]
        for run, want in cases:
            with self.subTest(run=run):
                await self.publish(run)
                a = await self.answer()
                self.assertEqual({k: a.get(k) for k in want}, want)
                self.assertNotIn("permanent", set(a) - set(want))
                self.assertEqual(await self.ack(), b"+ACK")
        self.assertIn("refused", self.seen)

    async def test_checkpoint_kept_between_iterations(self):
        @self.worker.handle("h")
        async def h(tc):
            await tc.append_checkpoint(tc.iteration)
            self.seen.append(list(await tc.load_checkpoint()))
            await tc.continue_(None)

        await self.start()
        # Iterations 1 to 4 on this worker: each goes on from the value the previous one left
        # in memory (iteration 4's second attempt purges what its first may have written, and
        # goes on from iteration 3's value all the same). Iteration 6 follows an iteration this
        # worker did not run (5): folded from the bucket.
        for it, attempt in [(1, 1), (2, 1), (3, 1), (4, 2), (6, 1)]:
            await self.publish("ck", iteration=it, attempt=attempt, type="agent_loop", msg_id=f"ck/s/1/{it}/{attempt}")
            self.assertEqual((await self.answer())["type"], "continued")
            self.assertEqual(await self.ack(), b"+ACK")
        self.assertEqual(self.seen, [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 6]])
        self.assertEqual(self.worker.ck_reloads, 1)

    async def test_answers_that_cannot_be_sent(self):
        raised = []

        @self.worker.handle("h")
        async def h(tc):
            try:
                if tc.run_id == "unencodable":
                    await tc.complete({"at": object()})
                else:
                    await tc.complete("x" * 70000)  # by reference, to a store that is gone
            except Exception as e:
                raised.append(type(e).__name__)
                raise

        await self.start()
        await self.js.request(f"STREAM.DELETE.OBJ_{self.names.values_bucket()}")
        for run, error, permanent in [("unencodable", "cannot be encoded as JSON", True), ("unstored", "cannot be stored", None)]:
            with self.subTest(run=run):
                await self.publish(run)
                a = await self.answer()
                self.assertEqual(a["type"], "failed")
                self.assertIn(error, a["error"])
                self.assertEqual(a.get("permanent"), permanent)
                self.assertEqual(await self.ack(), b"+ACK")
        self.assertEqual(len(raised), 2)

    async def test_not_a_task_and_not_due(self):
        @self.worker.handle("h")
        async def h(tc):
            self.seen.append(tc.run_id)
            await tc.complete(None)

        await self.start()
        await self.publish("bad", raw=b"not json")
        self.assertEqual(await self.ack(), b"+TERM")
        due = time.time_ns() + 3600 * 10**9
        await self.publish("later", not_before=p.format_time_ns(due))
        nak = await self.ack()
        self.assertTrue(nak.startswith(b"-NAK "), nak)
        delay = json.loads(nak[5:])["delay"]
        self.assertTrue(3500 * 10**9 < delay <= 3600 * 10**9, delay)
        self.assertEqual(self.seen, [])

    async def test_run_ended_and_worker_stopping(self):
        started, cancelled = asyncio.Event(), []

        @self.worker.handle("h")
        async def h(tc):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(tc.cause)
                raise

        await self.start()
        await self.publish("ended")
        await asyncio.wait_for(started.wait(), WAIT)
        await self.nc.publish(self.names.cancel_prefix() + "ended")
        self.assertEqual(await self.ack(), b"+ACK")  # acknowledged, not answered
        self.assertEqual(cancelled, ["run ended"])
        started.clear()
        await self.publish("stopping")
        await asyncio.wait_for(started.wait(), WAIT)
        self.stop.set()
        self.assertEqual(await self.ack(), b"-NAK")  # handed back, to run elsewhere
        await asyncio.wait_for(self.run, WAIT)
        self.assertEqual(cancelled, ["run ended", "worker stopping"])
        # No answer to either: the worker's connection is closed, so what it published came
        # before the answer to this PING.
        await self.nc.flush()
        self.assertTrue(self.events.queue.empty(), "an answer was published for a cancelled task")

    async def test_announces_what_it_serves(self):
        """The worker writes handler.NAME.WORKERID (value: its id) for each handler as it
        starts, again every served_every, and deletes them as it stops, as the Go SDK does."""
        b = self.names.served_bucket()
        await self.js.request(f"STREAM.CREATE.KV_{b}", {"name": "KV_" + b, "subjects": [f"$KV.{b}.>"], "storage": "memory",
                                                       "num_replicas": 1, "max_msgs_per_subject": 1, "max_age": 60 * 10**9,
                                                       "allow_rollup_hdrs": True, "deny_delete": True, "discard": "new"})
        writes = await self.nc.subscribe(f"$KV.{b}.>")
        for name in ("h", "pay.charge"):
            self.worker.handle(name, self.noop)
        self.worker.served_every = 0.1
        await self.start()
        wid = self.worker.effects.id
        keys = [f"handler.h.{wid}", f"handler.pay.charge.{wid}"]

        async def next_writes(n):
            out = []
            for _ in range(n):
                m = await writes.next(timeout=WAIT)
                out.append((m.subject[len(f"$KV.{b}."):], m.header("KV-Operation") or "PUT", m.data))
            return out

        # The first writes, then the same again (the announcement renewed).
        for _ in range(2):
            self.assertEqual(await next_writes(2), [(k, "PUT", wid.encode()) for k in keys])
        self.assertEqual(sorted((await KV(self.js, b).entries(">")).keys()), keys)
        self.stop.set()
        await asyncio.wait_for(self.run, WAIT)
        # A renewal may have been on its way as the worker stopped; the deletes come last.
        got = await next_writes(2)
        while got[-1][1] == "PUT" or got[-2][1] == "PUT":
            got = got[1:] + await next_writes(1)
        self.assertEqual(got, [(k, "DEL", b"") for k in keys])
        self.assertEqual(await KV(self.js, b).entries(">"), {})

    async def noop(self, tc):
        await tc.complete(None)


if __name__ == "__main__":
    unittest.main()
