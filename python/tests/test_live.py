"""Tests of the NATS client, JetStream, KV, object store and effect leases against a real
nats-server with JetStream, named by REINS_TEST_NATS_URL (e2e/python_test.go starts one and
sets it; without it these tests are skipped). Each test makes buckets of its own."""

import asyncio
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from reins_worker import protocol as p  # noqa: E402
from reins_worker.effects import Effects, Lease, LeaseLost, Values  # noqa: E402
from reins_worker.jetstream import KV, JetStream, ObjectStore, WrongRevision  # noqa: E402
from reins_worker.natsclient import NATSConnection, nuid  # noqa: E402
from reins_worker.transport import ConnectionLost, NoResponders, TransportError  # noqa: E402

URL = os.environ.get("REINS_TEST_NATS_URL", "")


@unittest.skipUnless(URL, "REINS_TEST_NATS_URL names no NATS server (e2e/python_test.go runs these with one)")
class Live(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.nc = await NATSConnection.connect(URL)
        self.js = JetStream(self.nc)
        self.bucket = "t" + nuid(8).lower()

    async def asyncTearDown(self):
        await self.nc.close()

    async def kv(self, name=""):
        name = name or self.bucket
        await self.js.request(f"STREAM.CREATE.KV_{name}", {
            "name": "KV_" + name, "subjects": [f"$KV.{name}.>"], "max_msgs_per_subject": 1, "discard": "new",
            "allow_rollup_hdrs": True, "deny_delete": True, "allow_direct": True, "storage": "memory", "num_replicas": 1})
        return KV(self.js, name)

    async def objects(self):
        name = self.bucket + "v"
        await self.js.request(f"STREAM.CREATE.OBJ_{name}", {
            "name": "OBJ_" + name, "subjects": [f"$O.{name}.C.>", f"$O.{name}.M.>"], "allow_rollup_hdrs": True,
            "discard": "new", "storage": "memory", "num_replicas": 1, "allow_direct": True})
        return ObjectStore(self.js, name)

    async def test_core(self):
        sub = await self.nc.subscribe("t.echo")
        await self.nc.publish("t.echo", b"hi", headers={"A": "1"})
        m = await sub.next(timeout=5)
        self.assertEqual((m.subject, m.data, m.header("a")), ("t.echo", b"hi", "1"))
        with self.assertRaises(NoResponders):
            await self.nc.request("t.nobody", b"", timeout=5)
        with self.assertRaises(asyncio.TimeoutError):
            await sub.next(timeout=0.01)

    async def test_flush_on_a_lost_connection(self):
        nc = await NATSConnection.connect(URL)
        nc._set_lost("the server went away")  # as the reader does when the socket closes
        with self.assertRaises(ConnectionLost):
            await nc.flush(1.0)
        # A PING never sent leaves no future behind for close() to fail with nobody to read it
        # ("Future exception was never retrieved" as a worker stopped on a lost connection).
        self.assertEqual(nc._pongs, [])
        await nc.close()

    async def test_refused_credentials(self):
        host = URL.split("://")[-1].split("@")[-1]
        if "@" in URL:  # a server without authentication takes any token
            with self.assertRaises(TransportError):
                await NATSConnection.connect("nats://wrong@" + host)

    async def test_kv(self):
        kv = await self.kv()
        r1 = await kv.create("a.1", b"one")
        with self.assertRaises(WrongRevision):
            await kv.create("a.1", b"again")
        with self.assertRaises(WrongRevision):
            await kv.update("a.1", b"two", r1 + 100)
        r2 = await kv.update("a.1", b"two", r1)
        self.assertEqual((await kv.get("a.1")).value, b"two")
        self.assertGreater(r2, r1)
        await kv.put("a.2", b"x")
        await kv.put("b.1", b"y")
        await kv.delete("a.2")
        self.assertIsNone(await kv.get("a.2"))
        await kv.create("a.2", b"back")  # a create on a deleted key
        await kv.purge("b.1")
        self.assertEqual({k: e.value for k, e in (await kv.entries("a.*")).items()}, {"a.1": b"two", "a.2": b"back"})
        self.assertEqual(await kv.entries("b.>"), {})
        self.assertEqual(await kv.entries("none.>"), {})

    async def test_wait_change(self):
        kv = await self.kv()
        rev = await kv.put("k", b"1")
        waiter = asyncio.ensure_future(kv.wait_change("k", rev, 60))
        await asyncio.sleep(0)  # let it subscribe; it looks again after, so a write at any time is seen
        await kv.put("k", b"2")
        await asyncio.wait_for(waiter, 10)

    async def test_objects(self):
        store = await self.objects()
        data = bytes(range(256)) * 1200  # 300 KiB: three chunks
        await store.put("run/x", data)
        self.assertEqual(await store.get("run/x", len(data)), data)
        self.assertIsNone(await store.get("run/none", 10))
        with self.assertRaises(ValueError):
            await store.get("run/x", len(data) - 1)
        values = Values(store)
        big = {"text": "é" * 70000}
        ref = await values.out("r1", big)
        self.assertTrue(p.is_ref(ref))
        self.assertEqual(await values.in_("r1", ref), big)
        self.assertEqual(await values.out("r1", {"small": 1}), {"small": 1})
        self.assertTrue(p.is_ref(await values.out("r1", "\x00short")))
        for bad, why in [(ref.replace(":r1/", ":r2/"), "not a value of run r1"),
                         (p.make_ref(5, "r1/" + "0" * 64), "missing")]:
            with self.subTest(bad=bad), self.assertRaises(p.ValueError_) as cm:
                await values.in_("r1", bad)
            self.assertIn(why, str(cm.exception))
        # An object whose bytes are not what its reference names is refused.
        await store.put("r1/" + "1" * 64, b'"changed"')
        with self.assertRaises(p.ValueError_):
            await values.in_("r1", p.make_ref(9, "r1/" + "1" * 64))

    async def effects(self):
        return Effects(await self.kv(), Values(await self.objects()), ack_wait=1.0)

    async def test_once(self):
        e = await self.effects()
        lease = Lease("task/1@w", 30, "r1")
        calls = []

        async def do():
            calls.append(1)
            return {"n": len(calls)}

        self.assertEqual(await e.once("id", lease, do), {"n": 1})
        self.assertEqual(await e.once("id", lease, do), {"n": 1})  # recorded: not run again
        self.assertEqual(len(calls), 1)
        rec = json.loads((await e.kv.get(p.effect_key("id"))).value)
        self.assertEqual(rec, {"done": True, "value": {"n": 1}})

        async def fails():
            calls.append(1)
            raise RuntimeError("no")

        with self.assertRaises(RuntimeError):
            await e.once("failing", lease, fails)
        self.assertIsNone(await e.kv.get(p.effect_key("failing")))  # released: did not happen
        self.assertEqual(await e.once("failing", lease, do), {"n": 3})

    async def test_large_result(self):
        e = await self.effects()

        async def do():
            return "x" * 70000

        self.assertEqual(await e.once("big", Lease("t@w", 30, "r1"), do), "x" * 70000)
        rec = json.loads((await e.kv.get(p.effect_key("big"))).value)
        self.assertTrue(p.is_ref(rec["value"]))
        self.assertEqual(await e.once("big", Lease("t@w", 30, "r1"), do), "x" * 70000)

    async def test_live_claim_is_waited_for(self):
        e = await self.effects()
        key = p.effect_key("id")
        await e.kv.create(key, p.claim_record("other@w", p.time.time_ns() + 60 * 10**9))
        waiting = asyncio.Event()
        e.waiting = lambda k: waiting.set()

        async def do():
            raise AssertionError("ran while another attempt held a live claim")

        once = asyncio.ensure_future(e.once("id", Lease("me@w", 30, "r1"), do))
        await asyncio.wait_for(waiting.wait(), 10)
        await e.kv.put(key, p.result_record("theirs"))  # the holder records its result
        self.assertEqual(await asyncio.wait_for(once, 10), "theirs")

    async def test_expired_claim_is_taken_over(self):
        e = await self.effects()
        key = p.effect_key("id")
        await e.kv.create(key, p.claim_record("dead@w", p.time.time_ns() - 1))

        async def do():
            claim = json.loads((await e.kv.get(key)).value)
            self.assertEqual(claim["holder"], "me@w")
            return "mine"

        self.assertEqual(await e.once("id", Lease("me@w", 30, "r1"), do), "mine")

    async def test_lost_claim_cannot_record(self):
        e = await self.effects()
        key = p.effect_key("id")

        async def do():  # another attempt takes the claim over while this one runs
            await e.kv.put(key, p.claim_record("thief@w", p.time.time_ns() + 60 * 10**9))
            return "late"

        with self.assertRaises(LeaseLost):
            await e.once("id", Lease("me@w", 30, "r1"), do)
        self.assertEqual(json.loads((await e.kv.get(key)).value)["holder"], "thief@w")

    async def test_renewal(self):
        e = await self.effects()
        key = p.effect_key("id")
        renewed = asyncio.Event()

        async def do():
            first = (await e.kv.get(key)).revision
            while (await e.kv.get(key)).revision == first:  # renewed every lease/3 (0.1 s here)
                await e.kv.wait_change(key, first, 10)
            renewed.set()
            return "ok"

        self.assertEqual(await e.once("id", Lease("me@w", 0.3, "r1"), do), "ok")
        self.assertTrue(renewed.is_set())


if __name__ == "__main__":
    unittest.main()
