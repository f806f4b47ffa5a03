"""A Lease nobody keeps is not renewed forever (issue 29, item 13): its
keepalive holds it only by a weak reference, so once collected it stops
(logged as a warning) and the grant expires after its TTL. Through a real
server, for the blocking and the asyncio client."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import unittest

import leasehold
import leasehold.aio
from leasehold import NotFoundError

from server import ModuleServer, uniq

SERVER = ModuleServer()
setUpModule, tearDownModule = SERVER.start, SERVER.stop


def gone(c: leasehold.Client, name: str) -> bool:
    try:
        c.get(name)
    except NotFoundError:
        return True
    return False


def threads_of(name: str) -> list:  # type: ignore[type-arg]
    return [t.name for t in threading.enumerate() if t.name.endswith(name) and t.name.startswith("leasehold-")]


class CollectedLeaseTest(unittest.TestCase):
    def test_a_lease_nobody_keeps_expires(self) -> None:
        c = leasehold.Client(SERVER.url, owner="gc-a")
        name = uniq("gc")
        with self.assertLogs("leasehold", logging.WARNING) as cm:
            c.try_acquire(name, ttl=1)  # dropped at once
            gc.collect()
        self.assertTrue(any(f"lease {name!r}" in r.getMessage() and "garbage-collected" in r.getMessage()
                            for r in cm.records), [r.getMessage() for r in cm.records])
        end = time.monotonic() + 20
        while time.monotonic() < end and (threads_of(name) or not gone(c, name)):
            time.sleep(0.05)
        self.assertEqual(threads_of(name), [])
        self.assertTrue(gone(c, name))  # expired: nobody renewed it
        time.sleep(1.5)
        self.assertTrue(gone(c, name))

    def test_a_kept_lease_is_renewed(self) -> None:
        c = leasehold.Client(SERVER.url, owner="gc-b")
        lease = c.try_acquire(uniq("gc-kept"), ttl=0.6)
        gc.collect()
        time.sleep(1.5)  # over two TTLs
        self.assertTrue(lease.held)
        self.assertFalse(gone(c, lease.name))
        lease.release()

    def test_a_released_lease_is_collected_quietly(self) -> None:
        c = leasehold.Client(SERVER.url, owner="gc-c")
        name = uniq("gc-released")
        lease = c.try_acquire(name, ttl=5)
        lease.release()
        with self.assertNoLogsCompat("leasehold", logging.WARNING):
            del lease
            gc.collect()

    def assertNoLogsCompat(self, logger: str, level: int):  # type: ignore[no-untyped-def]
        return self.assertNoLogs(logger, level)


class CollectedAsyncLeaseTest(unittest.IsolatedAsyncioTestCase):
    async def test_a_lease_nobody_keeps_expires(self) -> None:
        a = leasehold.aio.Client(SERVER.url, owner="gc-aio")
        name = uniq("gc-aio")
        with self.assertLogs("leasehold", logging.WARNING) as cm:
            await a.try_acquire(name, ttl=1)  # dropped at once
            gc.collect()
        self.assertTrue(any(f"lease {name!r}" in r.getMessage() and "garbage-collected" in r.getMessage()
                            for r in cm.records), [r.getMessage() for r in cm.records])

        async def expired() -> bool:
            try:
                await a.get(name)
            except NotFoundError:
                return True
            return False
        end = time.monotonic() + 20
        while time.monotonic() < end and not await expired():
            await asyncio.sleep(0.05)
        self.assertTrue(await expired())
        await asyncio.sleep(1.5)
        self.assertTrue(await expired())
        tasks = [t for t in asyncio.all_tasks() if t.get_name().endswith(name)]
        self.assertEqual(tasks, [])


if __name__ == "__main__":
    unittest.main()
