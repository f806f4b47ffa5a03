"""What the client logs through logging.getLogger("leasehold") (issue 29, item
12): waits, retries, renewal failures, losses and swallowed callback
exceptions, at the levels leasehold/_log.py gives, through a real server and
dynalite. Captured with unittest's assertLogs."""

from __future__ import annotations

import logging
import threading
import time
import unittest
from typing import List

import leasehold
from leasehold import HeldError, UnreachableError

from server import ModuleServer, Server, quiet_port, uniq
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


def lines(records: List[logging.LogRecord], level: int) -> List[str]:
    return [r.getMessage() for r in records if r.levelno == level]


class LoggingCases:  # the methods of unittest.TestCase come with the subclasses
    a: leasehold.Client
    b: leasehold.Client

    def test_a_wait_is_logged_at_info(self) -> None:
        name = uniq("log-wait")
        held = self.b.try_acquire(name, ttl=30)
        threading.Timer(0.3, held.release).start()
        with self.assertLogs("leasehold", logging.INFO) as cm:
            got = self.a.acquire(name, ttl=30, timeout=30)
        info = lines(cm.records, logging.INFO)
        self.assertTrue(any(f"waiting for {name!r}: held by 'log-b' (token {held.token}" in m for m in info), info)
        self.assertTrue(any(f"acquired {name!r} (token {got.token}) after waiting" in m for m in info), info)
        got.release()

    def test_a_loss_is_logged_at_error_and_a_failing_callback_with_its_traceback(self) -> None:
        name = uniq("log-lost")

        def bad_callback(lease: leasehold.Lease, err: leasehold.LeaseholdError) -> None:
            raise RuntimeError("callback broke")

        with self.assertLogs("leasehold", logging.ERROR) as cm:
            lease = self.a.try_acquire(name, ttl=0.3, keepalive=False, on_lost=bad_callback)
            self.assertTrue(lease.lost.wait(20))

            def ours() -> List[logging.LogRecord]:  # other tests' leases log too
                return [r for r in cm.records if repr(name) in r.getMessage()]
            self.assertTrue(wait_for(lambda: len(ours()) >= 2))
        mine = ours()
        msgs = [r.getMessage() for r in mine]
        self.assertIn(f"lease {name!r} (token {lease.token}) lost", msgs[0])
        self.assertIn("on_lost callback", msgs[1])
        self.assertEqual(mine[1].levelno, logging.ERROR)
        exc = mine[1].exc_info
        self.assertIsNotNone(exc)
        self.assertIsInstance(exc[1], RuntimeError)  # type: ignore[index]


class ServerLoggingTest(LoggingCases, unittest.TestCase):
    def setUp(self) -> None:
        self.a = leasehold.Client(SERVER.url, owner="log-a")
        self.b = leasehold.Client(SERVER.url, owner="log-b")

    def test_giving_up_is_logged_at_info(self) -> None:
        name = uniq("log-give-up")
        held = self.b.try_acquire(name, ttl=30)
        with self.assertLogs("leasehold", logging.INFO) as cm:
            with self.assertRaises(HeldError):
                self.a.acquire(name, ttl=30, timeout=0.3)
        info = lines(cm.records, logging.INFO)
        self.assertTrue(any(f"gave up acquiring {name!r}" in m for m in info), info)
        held.release()

    def test_acquire_retries_are_logged_at_warning(self) -> None:
        c = leasehold.Client(f"http://127.0.0.1:{quiet_port()}", owner="log-c", timeout=1)
        name = uniq("log-retry")
        with self.assertLogs("leasehold", logging.WARNING) as cm:
            with self.assertRaises(UnreachableError):
                c.acquire(name, ttl=5, timeout=0.5)
        warn = [m for m in lines(cm.records, logging.WARNING) if repr(name) in m]  # other tests' leases log too
        self.assertTrue(warn and all("attempt" in m and "retrying in" in m for m in warn), warn)

    def test_failed_renewals_are_logged_at_warning_before_the_loss(self) -> None:
        srv = Server()
        self.addCleanup(srv.stop)
        c = leasehold.Client(srv.url, owner="log-d", timeout=1)
        name = uniq("log-renew")
        with self.assertLogs("leasehold", logging.WARNING) as cm:
            lease = c.try_acquire(name, ttl=2)
            srv.stop()  # the keepalive's renewals fail from now on
            self.assertTrue(lease.lost.wait(20))
        ours = [r for r in cm.records if repr(name) in r.getMessage()]  # other tests' leases log too
        levels = [r.levelno for r in ours]
        self.assertIn(logging.WARNING, levels)
        self.assertEqual(levels[-1], logging.ERROR)
        self.assertEqual(levels.count(logging.ERROR), 1)
        self.assertTrue(all("failed" in m for m in lines(ours, logging.WARNING)))

    def test_the_package_adds_only_a_null_handler(self) -> None:
        handlers = logging.getLogger("leasehold").handlers
        self.assertTrue(handlers)
        self.assertTrue(all(isinstance(h, logging.NullHandler) for h in handlers), handlers)


class DynamoDBLoggingTest(LoggingCases, unittest.TestCase):
    def setUp(self) -> None:
        url = table_url("leasehold_py_test")
        self.a = leasehold.Client(url, owner="log-a")
        self.b = leasehold.Client(url, owner="log-b")
        self.addCleanup(self.a.close)
        self.addCleanup(self.b.close)


if __name__ == "__main__":
    unittest.main()
