"""A cancelled leasehold.aio acquire on DynamoDB stops its worker thread
(issue 29 red team of 2026-12-04, item 5): the blocking acquire it ran in
the client's pool polled on after the await was cancelled, with or without
``close()``, and the process did not exit until the holder let go. Now the
worker stops polling between attempts, ``close()`` stops the acquires under
way, and a grant the worker still gets after the cancellation is released.
Through dynalite (tests/test_dynamodb.py's ``table_url``)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import unittest
import urllib.parse
from typing import Any

import leasehold
import leasehold.aio
from leasehold import LeaseholdError, NotFoundError

from server import uniq
from test_dynamodb import table_url

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))

# The red team's program: an acquire without a timeout, cancelled while another
# process holds the lease (here once it is seen waiting, rather than after 1 s,
# so that the cancellation always meets the polling worker), then maybe close().
WAITER = r'''
import asyncio, sys
from leasehold import NotFoundError
from leasehold.aio import Client

URL, NAME, CLOSE = sys.argv[1], sys.argv[2], sys.argv[3] == "close"

async def main():
    c = Client(URL, owner="waiter")
    try:
        await c.get(NAME + "/none")  # the client is ready: boto3 imported, the table checked
    except NotFoundError:
        pass
    waiting = asyncio.Event()
    task = asyncio.ensure_future(c.acquire(NAME, ttl=10, on_wait=lambda e: waiting.set()))
    await waiting.wait()
    print("waiting", flush=True)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        print("cancelled", flush=True)
    if CLOSE:
        await c.close()
        print("closed", flush=True)

asyncio.run(main())
print("returned", flush=True)
'''

EXIT_BOUND = 45.0
"""Seconds the waiter has to exit (start, boto3's import and all): generous. Before
the fix it never exited while the lease was held."""


class CancelStopsTheWorkerTest(unittest.TestCase):
    url = ""

    @classmethod
    def setUpClass(cls) -> None:
        cls.url = table_url("leasehold_py_test")

    def setUp(self) -> None:
        self.holder = leasehold.Client(self.url, owner="holder")
        self.addCleanup(self.holder.close)

    def test_the_process_exits_while_the_lease_is_held(self) -> None:
        for how in ("cancel", "close"):
            with self.subTest(how=how):
                name = uniq("aio-exit")
                held = self.holder.try_acquire(name, ttl=30)  # renewed by its keepalive: held throughout
                try:
                    r = subprocess.run([sys.executable, "-c", WAITER, self.url, name, how], cwd=HERE,
                                       capture_output=True, text=True, timeout=EXIT_BOUND)
                except subprocess.TimeoutExpired as e:
                    self.fail(f"the waiter ({how}) did not exit within {EXIT_BOUND}s while the lease was held; "
                              f"its output: {e.stdout!r} {e.stderr!r}")
                finally:
                    info = self.holder.get(name)
                    held.release()
                self.assertEqual(r.returncode, 0, r.stderr)
                want = ["waiting", "cancelled"] + (["closed"] if how == "close" else []) + ["returned"]
                self.assertEqual(r.stdout.split(), want, r.stderr)
                self.assertEqual((info.owner, info.token), ("holder", held.token))  # never taken from the holder


class AioCancelTest(unittest.IsolatedAsyncioTestCase):
    url = ""

    @classmethod
    def setUpClass(cls) -> None:
        cls.url = table_url("leasehold_py_test")  # imports boto3: not in the event loop

    async def asyncSetUp(self) -> None:
        self.a = leasehold.aio.Client(self.url, owner="aio-cancel-a")
        self.b = leasehold.aio.Client(self.url, owner="aio-cancel-b")
        for c in (self.a, self.b):
            with self.assertRaises(NotFoundError):
                await c.get("py/aio-cancel/none")  # ready: the blocking client made in a thread

    async def asyncTearDown(self) -> None:
        await self.a.close()
        await self.b.close()

    async def test_close_stops_an_acquire_under_way(self) -> None:
        name = uniq("aio-close")
        holder = await self.b.try_acquire(name, ttl=30)
        waiting = asyncio.Event()
        with self.assertLogs("leasehold", logging.INFO) as cm:
            task = asyncio.ensure_future(self.a.acquire(name, ttl=30, on_wait=lambda e: waiting.set()))
            await asyncio.wait_for(waiting.wait(), 30)
            await self.a.close()
            # Before: the acquire polled on while the lease was held (here: for ever).
            with self.assertRaises(LeaseholdError) as raised:
                await asyncio.wait_for(task, 30)
        self.assertIn("cancelled by leasehold.aio", str(raised.exception))
        self.assertTrue(any(f"acquire {name!r} was cancelled: stopped polling" in r.getMessage() for r in cm.records),
                        [r.getMessage() for r in cm.records])
        self.assertEqual((await self.b.get(name)).token, holder.token)
        await holder.release()

    async def test_a_grant_made_after_the_cancel_is_released(self) -> None:
        """The worker's request is under way when the await is cancelled, and
        DynamoDB grants it: the grant is released, never kept."""
        name = uniq("aio-late")
        sending, go = threading.Event(), threading.Event()
        self.addCleanup(go.set)

        def hold_the_request(**_: Any) -> None:  # botocore's before-send event, in the worker thread
            if not go.is_set():
                sending.set()
                go.wait(60)

        # A boto3 client of the test's own (boto_client=), every request through it, that
        # holds the acquire's first UpdateItem until the await has been cancelled.
        import boto3
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.url).query)
        ddb = await asyncio.get_running_loop().run_in_executor(None, lambda: boto3.session.Session().client(
            "dynamodb", region_name=q["region"][0], endpoint_url=q["endpoint"][0]))
        self.addCleanup(ddb.close)
        c = leasehold.aio.Client(self.url, owner="aio-cancel-late", boto_client=ddb)
        with self.assertRaises(NotFoundError):
            await c.get(name)  # ready
        ddb.meta.events.register("before-send.dynamodb.UpdateItem", hold_the_request)
        with self.assertLogs("leasehold", logging.INFO) as cm:
            task = asyncio.ensure_future(c.acquire(name, ttl=30))
            self.assertTrue(await asyncio.get_running_loop().run_in_executor(None, sending.wait, 30))
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            go.set()  # the request goes on, and is granted (nobody holds the lease)
            for _ in range(3000):
                if any("released its late grant" in r.getMessage() for r in cm.records):
                    break
                await asyncio.sleep(0.01)
        self.assertTrue(any(f"acquire {name!r} was cancelled: released its late grant" in r.getMessage()
                            for r in cm.records), [r.getMessage() for r in cm.records])
        with self.assertRaises(NotFoundError):
            await self.b.get(name)
        await c.close()


if __name__ == "__main__":
    unittest.main()
