"""Starts a real ``leasehold serve`` for the tests: the binary named by
$LEASEHOLD_BIN (run_tests.sh builds it), on a free loopback port, with a
temporary data directory."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
import uuid
from typing import Callable, List, Optional


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process; ``url`` is its HTTP address."""

    def __init__(self, *extra: str, scheme: str = "http", ssl_context=None) -> None:
        binary = os.environ.get("LEASEHOLD_BIN", "")
        if not binary or not os.access(binary, os.X_OK):
            if os.environ.get("LEASEHOLD_REQUIRE_ENGINES") == "1":
                raise RuntimeError("LEASEHOLD_BIN is not an executable leasehold binary (LEASEHOLD_REQUIRE_ENGINES=1)")
            raise unittest.SkipTest("set LEASEHOLD_BIN to a leasehold binary (clients/python/run_tests.sh builds one)")
        self.dir = tempfile.mkdtemp(prefix="leasehold-py-")
        self.ssl_context = ssl_context
        self.proc: Optional[subprocess.Popen] = None
        for _ in range(5):  # a port taken between picking and binding: pick again
            port = free_port()
            self.url = f"{scheme}://127.0.0.1:{port}"
            log = open(os.path.join(self.dir, "server.log"), "ab")
            self.proc = subprocess.Popen(
                [binary, "serve", "--addr", f"127.0.0.1:{port}", "--resp-addr", "",
                 "--data-dir", os.path.join(self.dir, "data"), "--no-sync", "--log-level", "warn", *extra],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            log.close()
            if self._ready(30.0):
                return
            self.proc.kill()
            self.proc.wait()
        self.stop()
        raise RuntimeError("leasehold serve did not become ready")

    def _ready(self, within: float) -> bool:
        end = time.monotonic() + within
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2, context=self.ssl_context) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def uniq(prefix: str) -> str:
    """A fresh name under py/<prefix>/: tests that share a server never meet on a name."""
    return f"py/{prefix}/{uuid.uuid4().hex[:8]}"


class ModuleServer:
    """The one server of a test module, started by its setUpModule and stopped
    by its tearDownModule::

        SERVER = ModuleServer()
        setUpModule, tearDownModule = SERVER.start, SERVER.stop
    """

    def __init__(self) -> None:
        self.server: Optional[Server] = None

    def start(self, *extra: str) -> None:
        self.server = Server(*extra)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    @property
    def url(self) -> str:
        assert self.server is not None, "the module's server is not running (setUpModule)"
        return self.server.url


def run_threads(work: Callable[[int], None], n: int, timeout: float) -> List[BaseException]:
    """Runs work(0) .. work(n-1) in n threads at once, waits up to timeout
    seconds for each, and returns what they raised (the test asserts on it)."""
    errs: List[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except Exception as e:  # collected, asserted on by the test thread
            errs.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    return errs
