"""leasehold.aio, the asyncio client (issue 29, item 11), through a real server
and (its calls in worker threads) dynalite."""

from __future__ import annotations

import asyncio
import logging
import time
import unittest
from typing import List

import leasehold
import leasehold.aio
from leasehold import HeldError, InvalidError, LostError, NotFoundError, NotHeldError, UnsupportedError

from server import ModuleServer, uniq
from test_dynamodb import table_url

SERVER = ModuleServer()
setUpModule, tearDownModule = SERVER.start, SERVER.stop


async def eventually(cond, within: float = 20.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if await cond():
            return True
        await asyncio.sleep(0.02)
    return bool(await cond())


class AioCases:  # the methods of unittest.IsolatedAsyncioTestCase come with the subclasses
    a: leasehold.aio.Client
    b: leasehold.aio.Client

    async def free(self, name: str) -> bool:
        try:
            await self.b.get(name)
        except NotFoundError:
            return True
        return False

    async def test_acquire_refuse_release(self) -> None:
        name = uniq("aio")
        la = await self.a.try_acquire(name, ttl=30)
        self.assertTrue(la.held)
        with self.assertRaises(HeldError) as cm:
            await self.b.try_acquire(name, ttl=30)
        self.assertEqual((cm.exception.owner, cm.exception.token), (self.a.owner, la.token))
        self.assertEqual((await self.b.get(name)).token, la.token)
        asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(la.release()))
        waited: List[HeldError] = []
        lb = await self.b.acquire(name, ttl=30, timeout=30, on_wait=waited.append)
        await asyncio.sleep(0)  # DynamoDB: on_wait is called in the loop, soon after
        self.assertEqual([e.token for e in waited], [la.token])
        self.assertGreater(lb.token, la.token)
        self.assertFalse(la.held)
        await lb.release()
        await lb.release()  # twice is fine
        self.assertTrue(await self.free(name))

    async def test_async_with_renews_and_releases(self) -> None:
        name = uniq("aio-with")
        async with self.a.lease(name, ttl=0.6) as lease:
            first = lease.deadline
            await asyncio.sleep(1.2)  # two TTLs: only the keepalive task keeps it
            self.assertTrue(lease.held)
            self.assertGreater(lease.deadline, first)
            self.assertEqual((await self.b.get(name)).token, lease.token)
        self.assertTrue(lease.done.is_set())
        self.assertFalse(lease.lost.is_set())
        self.assertTrue(await self.free(name))
        again = await self.a.lease(name, ttl=5)  # awaited: the Lease itself
        self.assertGreater(again.token, lease.token)
        await again.release()

    async def test_lock(self) -> None:
        name = uniq("aio-lock")
        la, lb = self.a.lock(name, ttl=30), self.b.lock(name, ttl=30)
        with self.assertRaises(InvalidError):
            self.a.lock(name, timeout=5)  # type: ignore[arg-type]
        self.assertFalse(await la.locked())
        self.assertTrue(await la.acquire())
        self.assertTrue(la.owned())
        with self.assertRaises(InvalidError):
            await la.acquire()  # not reentrant
        self.assertFalse(await lb.acquire(blocking=False))
        self.assertTrue(await lb.locked())
        self.assertIs(await la.extend(ttl=20), True)
        first = la.token
        await la.release()
        with self.assertRaises(NotHeldError):
            await la.release()
        async with lb:
            self.assertGreater(lb.token, first)
            lb.check()
        self.assertFalse(lb.owned())
        self.assertTrue(await self.free(name))

    async def test_lock_extend_changes_the_current_hold_only(self) -> None:
        # Red team of 2026-12-04, item 8 (see test_lock.py): the lock's ttl stays.
        name = uniq("aio-extend-once")
        lock = self.a.lock(name, ttl=5)
        self.assertTrue(await lock.acquire())
        await lock.extend(60)
        self.assertEqual((await self.b.get(name)).ttl, 60)
        self.assertEqual(lock.ttl, 5)
        await lock.release()
        self.assertTrue(await lock.acquire())
        self.assertEqual((await self.b.get(name)).ttl, 5)
        self.assertEqual((lock.ttl, lock.lease.ttl), (5, 5))  # type: ignore[union-attr]
        await lock.release()

    async def test_cancelled_wait_leaves_nothing_held(self) -> None:
        name = uniq("aio-cancel")
        holder = await self.b.try_acquire(name, ttl=30)
        with self.assertRaises(NotFoundError):
            await self.a.get(name + "/none")  # the client is ready (DynamoDB: made in a thread at first use)
        with self.assertLogs("leasehold", logging.INFO) as cm:
            waiter = asyncio.ensure_future(self.a.acquire(name, ttl=30, timeout=3))

            async def waiting() -> bool:
                return any(f"waiting for {name!r}" in r.getMessage() for r in cm.records)
            self.assertTrue(await eventually(waiting))
            waiter.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await waiter
            await holder.release()
            # The cancelled waiter's place (server) or polling thread (DynamoDB) may get the
            # grant after the cancellation: it is released, never kept.
            self.assertTrue(await eventually(lambda: self.settled(cm.records)))
            self.assertTrue(await self.free(name))
        self.assertTrue(any(f"acquire {name!r} " in r.getMessage() and "cancelled" in r.getMessage()
                            for r in cm.records), [r.getMessage() for r in cm.records])

    async def settled(self, records: List[logging.LogRecord]) -> bool:
        """Whether what a cancelled acquire left behind has been dealt with."""
        raise NotImplementedError


class ServerAioTest(AioCases, unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.a = leasehold.aio.Client(SERVER.url, owner="aio-a")
        self.b = leasehold.aio.Client(SERVER.url, owner="aio-b")

    async def settled(self, records: List[logging.LogRecord]) -> bool:
        # The reclaim task (the same request id, then a release) has ended.
        return not any(t.get_name().startswith("leasehold-reclaim-") for t in asyncio.all_tasks())

    async def test_waits_that_run_out(self) -> None:
        name = uniq("aio-wait")
        holder = await self.a.try_acquire(name, ttl=30)
        with self.assertRaises(HeldError):
            await self.b.acquire(name, ttl=30, timeout=0.3)
        self.assertFalse(await self.b.lock(name, blocking_timeout=0.3).acquire())
        with self.assertRaises(HeldError):
            async with self.b.lock(name, blocking_timeout=0.3):
                self.fail("ran without the lock")
        await holder.release()

    async def test_lock_minus_one_waits_forever(self) -> None:
        name = uniq("aio-forever")
        la, lb = self.a.lock(name, ttl=30), self.b.lock(name, ttl=30, blocking_timeout=0.1)
        self.assertTrue(await la.acquire())

        async def later() -> None:
            await asyncio.sleep(1.0)
            await la.release()
        task = asyncio.ensure_future(later())
        self.assertTrue(await lb.acquire(True, -1))  # as threading.Lock.acquire(True, -1)
        await task
        await lb.release()
        with self.assertRaises(InvalidError):
            await lb.acquire(True, -2)

    async def test_a_loss_in_async_with_is_not_silent(self) -> None:
        name = uniq("aio-lost")
        lost = []
        with self.assertLogs("leasehold", logging.ERROR):
            with self.assertRaises(LostError):
                async with self.a.lease(name, ttl=1.5, on_lost=lambda lease, err: lost.append(err)) as lease:
                    await self.b.force_release(name)
                    self.assertTrue(await asyncio.wait_for(lease.lost.wait(), 20))
                    with self.assertRaises(LostError):
                        lease.check()
        self.assertEqual(len(lost), 1)

    async def test_deadline_without_renewal(self) -> None:
        name = uniq("aio-deadline")
        lease = await self.a.try_acquire(name, ttl=0.3, keepalive=False)
        self.assertTrue(await asyncio.wait_for(lease.lost.wait(), 20))  # the watcher task, at the deadline
        self.assertIsInstance(lease.error, LostError)

    async def test_semaphore_election_records(self) -> None:
        pool = self.a.semaphore(uniq("aio-sem"), permits=2)
        p1, p2 = await pool.acquire(ttl=30, timeout=5), await pool.try_acquire(ttl=30)
        self.assertEqual({p1.permit, p2.permit}, {0, 1})
        with self.assertRaises(HeldError):
            await pool.try_acquire(ttl=30)
        await p1.release()
        await p2.release()
        election = self.a.election(uniq("aio-elect"))
        self.assertIsNone(await election.leader())
        term = await election.campaign(ttl=30, data="10.0.0.1:8080")
        leader = await election.leader()
        self.assertEqual((leader.owner, leader.term), (self.a.owner, term.token))  # type: ignore[union-attr]
        await term.release()
        rec = self.a.records
        key = uniq("aio-rec")
        v = await rec.put(key, "one", 0)
        self.assertEqual((await rec.get(key)).value, b"one")
        self.assertEqual(await rec.put(key, b"two", v), v + 1)
        self.assertEqual((await rec.add(uniq("aio-count"), 5))[0], 5)

        async def append(old):
            await asyncio.sleep(0)
            return (old or b"") + b"+"
        self.assertEqual((await rec.update(key, append)).value, b"two+")
        await rec.delete(key, v + 2)
        with self.assertRaises(NotFoundError):
            await rec.get(key)


class DynamoDBAioTest(AioCases, unittest.IsolatedAsyncioTestCase):
    url = ""

    @classmethod
    def setUpClass(cls) -> None:
        cls.url = table_url("leasehold_py_test")  # imports boto3: not in the event loop

    async def asyncSetUp(self) -> None:
        self.a = leasehold.aio.Client(self.url, owner="aio-da")
        self.b = leasehold.aio.Client(self.url, owner="aio-db")
        self.assertIsInstance(self.a, leasehold.aio.DynamoDBClient)

    async def settled(self, records: List[logging.LogRecord]) -> bool:
        # The worker thread stopped polling (or, its request under way at the cancellation,
        # got the grant and released it).
        return any("stopped polling" in r.getMessage() or "released its late grant" in r.getMessage()
                   for r in records)  # only this test cancels

    async def asyncTearDown(self) -> None:
        await self.a.close()
        await self.b.close()

    async def test_a_closed_client_says_so(self) -> None:
        # A call after close() raised the thread pool's RuntimeError ("cannot
        # schedule new futures after shutdown"; the red team's re-check of 3a8df70).
        c = leasehold.aio.Client(self.url, owner="aio-closed")
        await (await c.try_acquire(uniq("aio-closed"), ttl=5)).release()
        await c.close()
        for call in (lambda: c.try_acquire(uniq("aio-closed"), ttl=5), lambda: c.get(uniq("aio-closed"))):
            with self.assertRaises(leasehold.LeaseholdError) as cm:
                await call()
            self.assertIn("closed", str(cm.exception))

    async def test_semaphore_and_no_records(self) -> None:
        pool = self.a.semaphore(uniq("aio-dsem"), permits=2)
        p1 = await pool.acquire(ttl=30, timeout=5)
        p2 = await pool.try_acquire(ttl=30)
        self.assertEqual({p1.permit, p2.permit}, {0, 1})
        with self.assertRaises(HeldError):
            await pool.try_acquire(ttl=30)
        await p1.release()
        await p2.release()
        with self.assertRaises(UnsupportedError):
            self.a.records


if __name__ == "__main__":
    unittest.main()
