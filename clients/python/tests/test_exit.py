"""Leaving a ``with`` block whose lease was lost (issue 29 red team, items 2
and 3): the loss is what the block's end reports, whatever the release does."""

from __future__ import annotations

import asyncio
import time
import unittest

import leasehold
import leasehold.aio
from leasehold import LostError, UnreachableError

from server import Server, uniq


def lose(lease) -> None:
    """Wait for a lease without keepalive to pass its local deadline."""
    end = time.monotonic() + 30
    while lease.held and time.monotonic() < end:
        time.sleep(0.02)
    assert not lease.held


class LossWinsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server()
        self.addCleanup(self.server.stop)

    def test_release_fails_after_loss(self) -> None:
        c = leasehold.Client(self.server.url, timeout=2)
        with self.assertRaises(LostError) as cm:
            with c.lease(uniq("exit"), ttl=0.5, keepalive=False) as lease:
                lose(lease)
                self.server.stop()  # the release at the end cannot reach it
        self.assertIsInstance(cm.exception.__context__, UnreachableError)

    def test_lock_release_fails_after_loss(self) -> None:
        c = leasehold.Client(self.server.url, timeout=2)
        lock = c.lock(uniq("exit"), ttl=0.5)
        with self.assertRaises(LostError):
            with lock:
                assert lock.lease is not None
                lock.lease._stop.set()  # no more renewals: lost at the deadline
                lose(lock.lease)
                self.server.stop()

    def test_aio_release_fails_after_loss(self) -> None:
        async def main() -> None:
            c = leasehold.aio.Client(self.server.url, timeout=2)
            with self.assertRaises(LostError) as cm:
                async with c.lease(uniq("exit"), ttl=0.5, keepalive=False) as lease:
                    while lease.held:
                        await asyncio.sleep(0.02)
                    self.server.stop()
            self.assertIsInstance(cm.exception.__context__, UnreachableError)
        asyncio.run(main())


class Boom(Exception):
    pass


class NoteTest(unittest.TestCase):
    """An exception raised inside a block whose lease was lost carries a note saying so."""

    def setUp(self) -> None:
        self.server = Server()
        self.addCleanup(self.server.stop)
        self.c = leasehold.Client(self.server.url)

    def lost_note(self, e: BaseException) -> str:
        notes = [n for n in getattr(e, "__notes__", []) if "was lost at 20" in n]
        self.assertEqual(len(notes), 1, getattr(e, "__notes__", None))
        return notes[0]

    @unittest.skipUnless(hasattr(BaseException, "add_note"), "add_note is Python 3.11's")
    def test_lease(self) -> None:
        name = uniq("note")
        with self.assertRaises(Boom) as cm:
            with self.c.lease(name, ttl=0.5, keepalive=False) as lease:
                lose(lease)
                raise Boom("my own error")
        self.assertIn(name, self.lost_note(cm.exception))

    @unittest.skipUnless(hasattr(BaseException, "add_note"), "add_note is Python 3.11's")
    def test_not_lost_no_note(self) -> None:
        with self.assertRaises(Boom) as cm:
            with self.c.lease(uniq("note"), ttl=30):
                raise Boom("my own error")
        self.assertFalse(getattr(cm.exception, "__notes__", []))

    @unittest.skipUnless(hasattr(BaseException, "add_note"), "add_note is Python 3.11's")
    def test_lock(self) -> None:
        lock = self.c.lock(uniq("note"), ttl=0.5)
        with self.assertRaises(Boom) as cm:
            with lock:
                assert lock.lease is not None
                lock.lease._stop.set()  # no more renewals: lost at the deadline
                lose(lock.lease)
                raise Boom("my own error")
        self.lost_note(cm.exception)

    @unittest.skipUnless(hasattr(BaseException, "add_note"), "add_note is Python 3.11's")
    def test_aio(self) -> None:
        async def main() -> None:
            c = leasehold.aio.Client(self.server.url)
            with self.assertRaises(Boom) as cm:
                async with c.lease(uniq("note"), ttl=0.5, keepalive=False) as lease:
                    while lease.held:
                        await asyncio.sleep(0.02)
                    raise Boom("my own error")
            self.lost_note(cm.exception)
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
