"""A semaphore's permit count, recorded with each permit as the Go client and
``leasehold run/hold --permits`` record it, and names used both as a lock and
as a semaphore (issue 29 red team, item 1), through a real server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
import unittest
from unittest import mock

import leasehold
import leasehold.aio
from leasehold import InvalidError, MismatchError

from server import ModuleServer, Server, answering_late, uniq
from test_dynamodb import table_url

SERVER = ModuleServer()
setUpModule, tearDownModule = SERVER.start, SERVER.stop


class GoHolder:
    """``leasehold hold --permits N NAME`` (the binary the tests run) until stopped."""

    def __init__(self, name: str, permits: int, store: str = "") -> None:
        self.p = subprocess.Popen([os.environ["LEASEHOLD_BIN"], "hold", "--store", store or SERVER.url, "--json",
                                   "--permits", str(permits), "--data", "go", name],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        if not line:
            self.p.wait(10)
            raise AssertionError(f"leasehold hold exited {self.p.returncode}: {self.p.stderr.read()}")
        self.grant = json.loads(line)

    def stop(self) -> None:
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(30)
        for f in (self.p.stdout, self.p.stderr):
            if f is not None:
                f.close()


class HungAfterGrantTest(unittest.TestCase):
    """A server of its own, SIGSTOPped right after it answered a grant."""

    def setUp(self) -> None:
        self.srv = Server()
        self.addCleanup(self.srv.stop)  # continues it first

    def test_the_name_check_after_a_grant_keeps_the_call_bound(self) -> None:
        # A lock's or a semaphore's acquire checks the name after its grant (a
        # get, a list, a give-back): each request had the client's whole
        # timeout, whatever was left of the call's (the red team of bf0c8c3,
        # on DynamoDB: 20 s for semaphore.acquire(timeout=0.3)).
        armed = threading.Event()

        def hang_after(f):  # type: ignore[no-untyped-def]
            def sync(*args, **kw):  # type: ignore[no-untyped-def]
                out = f(*args, **kw)
                if armed.is_set():
                    armed.clear()
                    self.srv.pause()
                return out

            async def aio(*args, **kw):  # type: ignore[no-untyped-def]
                out = await f(*args, **kw)
                if armed.is_set():
                    armed.clear()
                    self.srv.pause()
                return out
            return aio if asyncio.iscoroutinefunction(f) else sync

        c = leasehold.Client(self.srv.url, owner="py-check", timeout=2)
        self.addCleanup(c.close)
        for m in ("_wait_grant", "_post_acquire"):
            setattr(c, m, hang_after(getattr(c, m)))
        name = uniq("check")

        def aio(make):  # type: ignore[no-untyped-def]
            async def main() -> None:
                async with leasehold.aio.Client(self.srv.url, owner="py-check-aio", timeout=2) as ac:
                    for m in ("_wait_grant", "_post_acquire"):
                        setattr(ac, m, hang_after(getattr(ac, m)))
                    await make(ac)
            return lambda: asyncio.run(main())

        for what, call, bound in (
                ("semaphore.acquire(timeout=0.3)", lambda: c.semaphore(name + "/sem", 2).acquire(ttl=5, timeout=0.3),
                 0.3 + 0.5),
                ("lock.acquire(timeout=0.3)", lambda: c.lock(name + "/lock", ttl=5).acquire(timeout=0.3), 0.3 + 0.5),
                ("semaphore.try_acquire()", lambda: c.semaphore(name + "/try", 2).try_acquire(ttl=5), 2 + 0.5),
                ("aio semaphore.acquire(timeout=0.3)",
                 aio(lambda ac: ac.semaphore(name + "/asem", 2).acquire(ttl=5, timeout=0.3)), 0.3 + 0.5),
                ("aio lock.acquire(timeout=0.3)", aio(lambda ac: ac.lock(name + "/alock", ttl=5).acquire(timeout=0.3)),
                 0.3 + 0.5)):
            with self.subTest(what):
                self.srv.resume()
                armed.set()
                t0 = time.monotonic()
                with self.assertRaises(leasehold.Unreachable) as cm:
                    call()
                took = time.monotonic() - t0
                self.assertFalse(armed.is_set(), "the server was not stopped after a grant")
                self.assertTrue(cm.exception.request_id, "the grant's request id is not named (re-check of 433a312)")
                self.assertLess(took, bound + 0.4, f"{what} took {took:.3f}s (bound {bound}s)")


class PermitCountTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = leasehold.Client(SERVER.url, owner="py-a")

    def permits(self, name: str) -> list:
        return [x.name for x in self.c.list(name + "/permit/")]

    def test_go_semaphore_refuses_another_count(self) -> None:
        name = uniq("permits")
        go = GoHolder(name, 2)
        self.addCleanup(go.stop)
        with self.assertRaises(MismatchError) as cm:
            self.c.semaphore(name, 3).try_acquire(ttl=30)
        self.assertIsInstance(cm.exception, InvalidError)
        self.assertIn("2 permits", str(cm.exception))
        self.assertEqual(self.permits(name), [go.grant["lease"]])  # the Python permit was given back
        with self.assertRaises(MismatchError):
            self.c.semaphore(name, 3).acquire(ttl=30, timeout=5)
        self.assertEqual(self.permits(name), [go.grant["lease"]])
        # The same count is taken; the record of N is hidden from data.
        lease = self.c.semaphore(name, 2).try_acquire(ttl=30, data="mine")
        self.addCleanup(lease.release)
        self.assertEqual(lease.info.data, b"mine")
        raw = self.c.get(lease.name).data
        self.assertEqual(raw, b"leasehold-permits=2\nmine")

    def test_go_refuses_python_count(self) -> None:
        name = uniq("permits")
        lease = self.c.semaphore(name, 3).try_acquire(ttl=30)
        self.addCleanup(lease.release)
        r = subprocess.run([os.environ["LEASEHOLD_BIN"], "hold", "--store", SERVER.url, "-n", "--permits", "2", name],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 78, r.stderr)

    def test_lock_and_semaphore_names(self) -> None:
        name = uniq("permits")
        permit = self.c.semaphore(name, 2).try_acquire(ttl=30)
        lock = self.c.lock(name, ttl=30)
        with self.assertRaises(MismatchError):
            lock.acquire(blocking=False)
        self.assertFalse(lock.owned())
        self.assertFalse(lock.locked())  # the lock's lease was given back
        permit.release()
        self.assertTrue(lock.acquire(blocking=False))
        self.addCleanup(lock.release)
        with self.assertRaises(MismatchError) as cm:
            self.c.semaphore(name, 2).try_acquire(ttl=30)
        self.assertIn("plain lease", str(cm.exception))
        self.assertEqual(self.permits(name), [])
        self.assertTrue(lock.owned())

    def test_a_raced_permit_is_not_given_back_past_the_bound(self) -> None:
        # A permit found by the give-up of acquire(timeout=T) with less than
        # MIN_REQUEST left before the call's bound stays (it expires after its
        # TTL): its release was sent with MIN_REQUEST anyway, past the bound.
        from leasehold._http import name_path

        name = uniq("permits")
        sem = self.c.semaphore(name, 2)
        held = sem.try_acquire(ttl=30, request_id="raced-p", keepalive=False)
        self.addCleanup(held.release)
        post = self.c._post_acquire
        hard = time.monotonic() + 0.4  # the late answer comes 20 ms before it
        releases = []
        with mock.patch.object(self.c, "_post_acquire", answering_late(post, hard - 0.02)), \
                mock.patch.object(self.c, "_quiet_release", lambda *a, **kw: releases.append((a, kw))):
            self.c._reclaim(name_path("v1/semaphores", name, "acquire"), sem._body(30, None, "raced-p"), name, hard)
        self.assertLess(time.monotonic(), hard + 1.0)  # no request after the late answer (generous: a loaded machine)
        self.assertEqual(releases, [], "a release was sent with less than MIN_REQUEST left")
        self.assertEqual(self.permits(name), [held.name])  # still held: it expires after its TTL

    def test_a_raced_permit_is_not_given_back_past_the_bound_aio(self) -> None:
        from leasehold._http import name_path

        async def main() -> None:
            name = uniq("permits")
            async with leasehold.aio.Client(SERVER.url, owner="py-aio-raced") as c:
                sem = c.semaphore(name, 2)
                held = await sem.try_acquire(ttl=30, request_id="raced-a", keepalive=False)
                post = c._post_acquire
                hard = time.monotonic() + 0.4  # the late answer comes 20 ms before it
                releases = []

                async def late(*args, **kw):  # type: ignore[no-untyped-def]
                    out = await post(*args, **kw)
                    await asyncio.sleep(max(hard - 0.02 - time.monotonic(), 0))
                    return out

                async def spy(*args, **kw):  # type: ignore[no-untyped-def]
                    releases.append((args, kw))
                with mock.patch.object(c, "_post_acquire", late), mock.patch.object(c, "_quiet_release", spy):
                    await c._reclaim(name_path("v1/semaphores", name, "acquire"), sem._body(30, None, "raced-a"),
                                     name, hard)
                self.assertLess(time.monotonic(), hard + 1.0)  # no request after the late answer (generous: a loaded machine)
                self.assertEqual(releases, [], "a release was sent with less than MIN_REQUEST left")
                self.assertEqual([x.name for x in await c.list(name + "/permit/")], [held.name])
                await held.release()
        asyncio.run(main())

    def test_aio(self) -> None:
        async def main() -> None:
            name = uniq("permits")
            async with leasehold.aio.Client(SERVER.url, owner="py-aio") as c:
                lease = await c.semaphore(name, 2).try_acquire(ttl=30, data=b"x")
                self.assertEqual(lease.info.data, b"x")
                with self.assertRaises(MismatchError):
                    await c.semaphore(name, 3).acquire(ttl=30, timeout=5)
                with self.assertRaises(MismatchError):
                    await c.lock(name, ttl=30).acquire()
                self.assertEqual([x.name for x in await c.list(name)], [lease.name])
                await lease.release()
        asyncio.run(main())


class DynamoDBPermitCountTest(unittest.TestCase):
    """The same directly on DynamoDB (DirectSemaphore, and a Go semaphore on the same table)."""

    def setUp(self) -> None:
        self.url = table_url("leasehold_py_test")
        self.c = leasehold.Client(self.url, owner="py-d")
        self.addCleanup(self.c.close)

    def test_go_and_python_counts(self) -> None:
        name = uniq("dpermits")
        go = GoHolder(name, 2, self.url)
        self.addCleanup(go.stop)
        with self.assertRaises(MismatchError):
            self.c.semaphore(name, 3).try_acquire(ttl=30)
        self.assertEqual([x.name for x in self.c.list(name + "/permit/")], [go.grant["lease"]])
        lease = self.c.semaphore(name, 2).acquire(ttl=30, timeout=10, data=b"d")
        self.assertEqual(lease.info.data, b"d")
        lease.release()

    def test_lock_and_semaphore_names(self) -> None:
        name = uniq("dpermits")
        permit = self.c.semaphore(name, 2).try_acquire(ttl=30)
        with self.assertRaises(MismatchError):
            self.c.lock(name, ttl=30).acquire(blocking=False)
        permit.release()
        lock = self.c.lock(name, ttl=30)
        self.assertTrue(lock.acquire(blocking=False))
        self.addCleanup(lock.release)
        with self.assertRaises(MismatchError):
            self.c.semaphore(name, 2).try_acquire(ttl=30)
        self.assertEqual([x.name for x in self.c.list(name + "/permit/")], [])

    def test_aio(self) -> None:
        async def main() -> None:
            name = uniq("dpermits")
            async with leasehold.aio.Client(self.url, owner="py-daio") as c:
                lease = await c.semaphore(name, 2).try_acquire(ttl=30)
                with self.assertRaises(MismatchError):
                    await c.semaphore(name, 3).try_acquire(ttl=30)
                with self.assertRaises(MismatchError):
                    await c.lock(name, ttl=30).acquire(blocking=False)
                await lease.release()
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
