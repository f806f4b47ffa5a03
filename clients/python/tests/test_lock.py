"""client.lock(): a reusable lock shaped like redis-py's, through a real server
and (when dynalite is there) directly on DynamoDB (issue 29, item 10)."""

from __future__ import annotations

import os
import threading
import time
import unittest

import leasehold
from leasehold import Held, Invalid, Lost, NotHeld

from server import ModuleServer, uniq
from test_dynamodb import table_url

SERVER = ModuleServer()
setUpModule, tearDownModule = SERVER.start, SERVER.stop


def wait_for(cond, within: float = 20.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


class LockCases:  # the methods of unittest.TestCase come with the subclasses
    """The cases both stores run; a subclass makes ``self.a`` and ``self.b``."""

    a: leasehold.Client
    b: leasehold.Client

    def test_acquire_release_and_again(self) -> None:
        name = uniq("lock")
        la, lb = self.a.lock(name, ttl=30), self.b.lock(name, ttl=30)
        self.assertFalse(la.locked())
        self.assertTrue(la.acquire())
        self.assertTrue(la.owned())
        self.assertTrue(lb.locked())
        self.assertFalse(lb.owned())
        first = la.token
        self.assertIsNotNone(first)
        self.assertFalse(lb.acquire(blocking=False))
        la.release()
        self.assertFalse(la.owned())
        self.assertIsNone(la.token)
        self.assertTrue(lb.acquire(timeout=10))
        self.assertGreater(lb.token, first)
        lb.release()
        self.assertTrue(la.acquire(blocking=False))  # reusable: a new grant, a greater token
        self.assertGreater(la.token, lb.lease.token if lb.lease else first)
        la.release()
        self.assertFalse(la.locked())

    def test_with_block_twice(self) -> None:
        name = uniq("with")
        lock = self.a.lock(name, ttl=30)
        tokens = []
        for _ in range(2):
            with lock as held:
                self.assertIs(held, lock)
                self.assertTrue(self.b.lock(name).locked())
                lock.check()
                tokens.append(lock.token)
            self.assertFalse(lock.owned())
        self.assertLess(tokens[0], tokens[1])
        self.assertFalse(lock.locked())

    def test_misuse_is_refused(self) -> None:
        name = uniq("misuse")
        with self.assertRaises(Invalid) as cm:
            self.a.lock(name, timeout=10)  # type: ignore[arg-type]  # redis-py's TTL spelling
        self.assertEqual(cm.exception.field, "timeout")
        self.assertIn("ttl=", str(cm.exception))
        self.assertIn("blocking_timeout=", str(cm.exception))
        lock = self.a.lock(name, ttl=30)
        with self.assertRaises(NotHeld):
            lock.release()
        with self.assertRaises(Invalid):
            lock.acquire(blocking=False, timeout=1)
        with self.assertRaises(Invalid):
            lock.acquire(timeout=-2)  # -1 waits without end, as threading's
        with self.assertRaises(Invalid):
            self.a.lock(name, blocking_timeout=float("nan"))
        self.assertFalse(lock.locked())  # nothing was taken
        self.assertTrue(lock.acquire())
        with self.assertRaises(Invalid) as cm:
            lock.acquire()  # not reentrant: it would wait for itself
        self.assertEqual(cm.exception.field, "lock")
        lock.release()
        self.assertIn("not held", repr(lock))

    def test_extend_restarts_the_ttl(self) -> None:
        name = uniq("extend")
        lock = self.a.lock(name, ttl=5)
        with self.assertRaises(NotHeld):
            lock.extend()
        self.assertTrue(lock.acquire())
        self.assertIs(lock.extend(), True)
        self.assertIs(lock.extend(ttl=40), True)
        self.assertEqual(self.b.get(name).ttl, 40)
        self.assertEqual(lock.lease.ttl, 40)  # type: ignore[union-attr]  # this hold's renewals: 40 s
        self.assertGreater(lock.lease.deadline - time.monotonic(), 30)  # type: ignore[union-attr]
        lock.release()

    def test_extend_changes_the_current_hold_only(self) -> None:
        # Red team of 2026-12-04, item 8: after extend(60), every later grant of the
        # lock had a TTL of 60 s (lock.ttl became 60). As redis-py's and
        # python-redis-lock's extend, it changes the hold it extends, not the lock.
        name = uniq("extend-once")
        lock = self.a.lock(name, ttl=5)
        self.assertTrue(lock.acquire())
        lock.extend(60)
        self.assertEqual(self.b.get(name).ttl, 60)
        self.assertEqual(lock.ttl, 5)
        lock.release()
        self.assertTrue(lock.acquire())
        self.assertEqual(self.b.get(name).ttl, 5)  # the second grant: the lock's TTL
        self.assertEqual((lock.ttl, lock.lease.ttl), (5, 5))  # type: ignore[union-attr]
        self.assertIn("ttl=5 ", repr(lock))
        lock.extend()  # the hold's TTL, the lock's here
        self.assertEqual(self.b.get(name).ttl, 5)
        lock.release()


class ServerLockTest(LockCases, unittest.TestCase):
    def setUp(self) -> None:
        self.a = leasehold.Client(SERVER.url, owner="py-lock-a")
        self.b = leasehold.Client(SERVER.url, owner="py-lock-b")

    # Waits that run out against a holder: on DynamoDB the last attempt of such a wait
    # may end as UnreachableError (no time left for its read) on a loaded machine.
    def test_with_block_that_cannot_acquire_raises_held(self) -> None:
        name = uniq("with-held")
        holder = self.a.lock(name, ttl=30)
        self.assertTrue(holder.acquire())
        ran = []
        with self.assertRaises(Held) as cm:
            with self.b.lock(name, ttl=30, blocking_timeout=1.5):
                ran.append(1)
        self.assertEqual(ran, [])
        self.assertEqual((cm.exception.owner, cm.exception.token), (self.a.owner, holder.token))
        holder.release()

    def test_waits_that_run_out_return_false(self) -> None:
        name = uniq("lock-wait")
        holder = self.a.lock(name, ttl=30)
        self.assertTrue(holder.acquire())
        waiter = self.b.lock(name, ttl=30, blocking_timeout=0.5)
        self.assertFalse(waiter.acquire())  # blocking_timeout
        self.assertFalse(waiter.acquire(timeout=0.3))
        self.assertFalse(waiter.owned())
        holder.release()

    def test_a_hold_lost_in_the_block_is_not_silent(self) -> None:
        name = uniq("lost")
        lock = self.a.lock(name, ttl=1.5)
        seen = []
        with self.assertRaises(Lost):
            with lock:
                self.b.force_release(name)
                self.assertTrue(wait_for(lambda: not lock.owned()))  # the keepalive's renewal is refused
                with self.assertRaises(Lost):
                    lock.check()
                seen.append("block ended")
        self.assertEqual(seen, ["block ended"])
        self.assertFalse(lock.owned())
        self.assertTrue(lock.acquire(blocking=False))  # the Lock is usable again
        lock.release()

    def test_release_after_loss_raises_lost(self) -> None:
        name = uniq("lost-release")
        lock = self.a.lock(name, ttl=1.5)
        self.assertTrue(lock.acquire())
        self.b.force_release(name)
        self.assertTrue(wait_for(lambda: not lock.owned()))
        with self.assertRaises(Lost):
            lock.release()
        with self.assertRaises(NotHeld):
            lock.release()


    def test_minus_one_waits_forever(self) -> None:
        # As threading.Lock.acquire(True, -1): without end, whatever blocking_timeout.
        name = uniq("forever")
        la, lb = self.a.lock(name, ttl=30), self.b.lock(name, ttl=30, blocking_timeout=0.1)
        self.assertTrue(la.acquire())
        t = threading.Timer(1.0, la.release)
        t.start()
        self.addCleanup(t.join)
        self.assertTrue(lb.acquire(True, -1))
        self.assertTrue(lb.owned())
        lb.release()
        self.assertTrue(lb.acquire(False, -1))  # threading's default timeout with blocking=False
        lb.release()
        with self.assertRaises(Invalid):
            lb.acquire(True, -2)


class DynamoDBLockTest(LockCases, unittest.TestCase):
    def setUp(self) -> None:
        url = table_url("leasehold_py_test")
        self.a = leasehold.Client(url, owner="py-dlock-a")
        self.b = leasehold.Client(url, owner="py-dlock-b")
        self.addCleanup(self.a.close)
        self.addCleanup(self.b.close)


if __name__ == "__main__":
    unittest.main()
