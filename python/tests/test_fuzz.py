"""Random inputs against the package's parsers (Python's standard library has no fuzzer, so
these are seeded random tests: set REINS_FUZZ_N for more cases, REINS_FUZZ_SEED for others).
Each parser either returns what re-encodes to its input or raises its one error type; the
checkpoint fold agrees with folding every write from the start."""

import json
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from reins_worker import protocol as p  # noqa: E402
from reins_worker.natsclient import parse_headers  # noqa: E402
from reins_worker.transport import TransportError  # noqa: E402

N = int(os.environ.get("REINS_FUZZ_N", "3000"))
SEED = int(os.environ.get("REINS_FUZZ_SEED", "1"))

VALID_TASK = {"run_id": "r", "step": "s", "item": -1, "body": "s", "type": "agent_loop", "handler": "h", "activation": 1,
              "iteration": 2, "attempt": 1, "input": {"a": [1, "x"]}, "msg_id": "r/s/1/2/1", "timeout": 5, "resume": 1,
              "not_before": "2023-11-14T22:13:20.1234567Z", "protocol": 1}


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(3)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[min(i, len(b) - 1)]
        elif op == 1:
            b.insert(i, rng.randrange(256))
        elif b:
            b[min(i, len(b) - 1)] = rng.choice(b'{}[]",:0123456789-.aZ\\ \x00')
    return bytes(b)


class Fuzz(unittest.TestCase):
    def setUp(self):
        self.rng = random.Random(SEED)

    def test_decode_task(self):
        valid = json.dumps(VALID_TASK).encode()
        for _ in range(N):
            data = mutate(self.rng, valid) if self.rng.random() < 0.9 else self.rng.randbytes(self.rng.randrange(40))
            try:
                t = p.decode_task(data)
            except p.ProtocolError:
                continue
            self.assertTrue(t.run_id and t.step and t.msg_id, data)
            self.assertTrue(t.activation >= 1 and t.iteration >= 1 and t.attempt >= 1, data)

    def test_checkpoint_keys(self):
        for _ in range(N):
            key = "".join(self.rng.choice("0123456789r.s/_") for _ in range(self.rng.randrange(1, 12)))
            try:
                w = p.parse_checkpoint_key(key)
            except p.ProtocolError:
                continue
            self.assertEqual(w.key(), key)

    def test_headers(self):
        valid = b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\nA: b\r\n\r\n"
        for _ in range(N):
            try:
                headers, status, _ = parse_headers(mutate(self.rng, valid))
            except TransportError:
                continue
            self.assertIsInstance(headers, dict)
            self.assertIsInstance(status, str)

    def test_refs(self):
        name = "r1/" + "a" * 64
        valid = p.make_ref(10, name)
        for _ in range(N):
            ref = mutate(self.rng, valid.encode()).decode(errors="replace")
            try:
                size, got = p.parse_ref(ref if p.is_ref(ref) else valid, "r1")
            except p.ValueError_:
                continue
            self.assertTrue(got.startswith("r1/"))
            self.assertEqual(p.make_ref(size, got), ref if p.is_ref(ref) else valid)

    def test_times(self):
        for _ in range(N):
            ns = self.rng.randrange(0, 4102444800 * 10**9)
            self.assertEqual(p.parse_time_ns(p.format_time_ns(ns)), ns)

    def test_fold(self):
        for _ in range(N // 10):
            writes = []
            for n in range(self.rng.randrange(8)):
                it = self.rng.randrange(1, 4)
                kind = self.rng.randrange(3)
                d = {"set": self.rng.choice([[], [0], None, {"a": 1}])} if kind == 0 else {"append": [self.rng.randrange(9)] * self.rng.randrange(3)}
                writes.append((p.CheckpointWrite(it, 0, n), d))
            naive = p.NOTHING
            ok = True
            for _, d in sorted(writes, key=lambda e: e[0]):
                try:
                    naive = p.apply_write(naive, d)
                except p.ProtocolError:
                    ok = False
            try:
                got = p.fold(writes)
            except p.ProtocolError:
                # The fold starts at the last set: what it refuses comes after it, which
                # folding from the start refuses too.
                self.assertFalse(ok, writes)
                continue
            if ok:
                self.assertEqual(got, naive, writes)


if __name__ == "__main__":
    unittest.main()
