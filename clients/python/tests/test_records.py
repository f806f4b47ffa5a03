"""Versioned records through a real leasehold server."""

from __future__ import annotations

import json
import unittest

from leasehold import Client, Conflict, Invalid, NotFound, RetriesExhausted, Write

from server import ModuleServer, run_threads, uniq

SERVER = ModuleServer()
setUpModule, tearDownModule = SERVER.start, SERVER.stop


class RecordsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.r = Client(SERVER.url).records

    def test_put_if_version(self) -> None:
        k = uniq("put")
        v1 = self.r.put(k, "on", 0)
        self.assertEqual(self.r.get(k).value, b"on")
        with self.assertRaises(Conflict) as cm:
            self.r.put(k, "again", 0)  # create, but it exists
        self.assertEqual((cm.exception.key, cm.exception.expected_version, cm.exception.current_version), (k, 0, v1))
        v2 = self.r.put(k, b"\x00\xff", v1)
        self.assertGreater(v2, v1)
        with self.assertRaises(Conflict) as cm:
            self.r.put(k, "stale", v1)  # a writer that read v1
        self.assertEqual((cm.exception.expected_version, cm.exception.current_version), (v1, v2))
        rec = self.r.get(k)
        self.assertEqual((rec.value, rec.version), (b"\x00\xff", v2))  # refused writes changed nothing

    def test_delete_if_version(self) -> None:
        k = uniq("del")
        v = self.r.put(k, "x", 0)
        with self.assertRaises(Conflict):
            self.r.delete(k, v + 1)
        self.assertEqual(self.r.get(k).version, v)
        self.r.delete(k, v)
        with self.assertRaises(NotFound):
            self.r.get(k)
        with self.assertRaises(NotFound):
            self.r.delete(k, v)
        with self.assertRaises(Invalid):
            self.r.delete(k, 0)

    def test_add_is_atomic(self) -> None:
        k = uniq("add")

        def adder(_: int) -> None:
            for _ in range(25):
                self.r.add(k, 1)

        self.assertEqual(run_threads(adder, 4, 60), [])
        value, _ = self.r.add(k, 0)
        self.assertEqual(value, 100)
        s = uniq("str")
        self.r.put(s, "not a number", 0)
        with self.assertRaises(Invalid):
            self.r.add(s, 1)
        self.assertEqual(self.r.get(s).value, b"not a number")

    def test_txn_all_or_nothing(self) -> None:
        order, bal, ledger = uniq("order"), uniq("bal"), uniq("ledger")
        vo = self.r.put(order, json.dumps({"status": "new"}), 0)
        _, vb = self.r.add(bal, 100)
        with self.assertRaises(Conflict) as cm:
            self.r.txn({order: vo, bal: vb + 1}, [Write.put(order, "paid"), Write.add_to(bal, -30), Write.put(ledger, "x")])
        self.assertEqual(cm.exception.key, bal)
        self.assertEqual(self.r.get(order).version, vo)
        with self.assertRaises(NotFound):
            self.r.get(ledger)
        vs = self.r.txn({order: vo, bal: vb, ledger: 0},
                        [Write.put(order, "paid"), Write.add_to(bal, -30), Write.put(ledger, b"\x00")])
        self.assertEqual(set(vs), {order, bal, ledger})
        self.assertEqual(self.r.get(bal).value, b"70")
        self.assertEqual(self.r.get(ledger).value, b"\x00")
        vs = self.r.txn({}, [Write.remove(ledger)])
        self.assertEqual(vs, {ledger: 0})
        with self.assertRaises(Invalid):  # a key written twice
            self.r.txn({}, [Write.put(order, "a"), Write.put(order, "b")])
        self.assertEqual(self.r.get(order).value, b"paid")

    def test_update_loses_no_write(self) -> None:
        k = uniq("update")

        def bump(old):
            n = json.loads(old)["n"] if old else 0
            return json.dumps({"n": n + 1})

        def worker(_: int) -> None:
            for _ in range(10):
                self.r.update(k, bump, attempts=200)

        self.assertEqual(run_threads(worker, 4, 120), [])
        self.assertEqual(json.loads(self.r.get(k).value)["n"], 40)

    def test_update_gives_up_after_attempts(self) -> None:
        k = uniq("exhaust")
        self.r.put(k, "0", 0)
        calls = []

        def meddle(old):
            calls.append(old)
            cur = self.r.get(k)
            self.r.put(k, "other", cur.version)  # another writer gets in first, every time
            return b"mine"

        with self.assertRaises(RetriesExhausted) as cm:
            self.r.update(k, meddle, attempts=3)
        self.assertEqual(cm.exception.attempts, 3)
        self.assertIsInstance(cm.exception, Conflict)
        self.assertEqual(len(calls), 3)
        self.assertEqual(self.r.get(k).value, b"other")
        with self.assertRaises(Invalid):
            self.r.update(k, meddle, attempts=0)


if __name__ == "__main__":
    unittest.main()
