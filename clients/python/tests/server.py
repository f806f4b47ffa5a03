"""Starts a real ``leasehold serve`` for the tests: the binary named by
$LEASEHOLD_BIN (run_tests.sh builds it), on a free loopback port, with a
temporary data directory."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
import uuid
from typing import Any, Callable, List, Optional

import engines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sigstop(pid: int, within: float = 30.0) -> None:
    """SIGSTOP pid and return once every thread of it has stopped: kill()
    returns before that, and on a loaded machine a multi-threaded server
    (Go's, node's) went on answering requests for a while after it."""
    os.kill(pid, signal.SIGSTOP)
    end = time.monotonic() + within
    while True:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue  # a thread that exited
        if states and all(st in ("T", "t") for st in states):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"process {pid} did not stop within {within}s (thread states {states})")
        time.sleep(0.005)


def quiet_port() -> int:
    """A port nobody listens on, below the kernel's ephemeral range (as
    scripts/engines.sh picks them): no port-0 bind or outgoing connection of
    another process takes it between this pick and the caller's bind."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    lo, hi = (10000, low) if low - 10000 >= 2000 else (20000, 60000)
    for _ in range(200):
        p = random.randrange(lo, hi)
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", p)) != 0:
                return p
    raise RuntimeError("no free port found")


class Server:
    """One server process; ``url`` is its HTTP address. The server binds a
    port of the kernel's choosing and announces it on stdout ("HTTP API on
    URL/v1/"), so no other process can take the port between a pick and the
    bind (a CI run on the same machine starts servers of its own)."""

    def __init__(self, *extra: str, scheme: str = "http", ssl_context=None) -> None:
        binary = os.environ.get("LEASEHOLD_BIN", "")
        if not binary or not os.access(binary, os.X_OK):
            engines.missing("$LEASEHOLD_BIN, a leasehold binary (clients/python/run_tests.sh builds one)")
        self.dir = tempfile.mkdtemp(prefix="leasehold-py-")
        self.ssl_context = ssl_context
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""
        logname = os.path.join(self.dir, "server.log")
        log = open(logname, "ab")
        self.proc = subprocess.Popen(
            [binary, "serve", "--addr", "127.0.0.1:0", "--resp-addr", "",
             "--data-dir", os.path.join(self.dir, "data"), "--no-sync", "--log-level", "warn", *extra],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        if self._announced(logname, scheme, 30.0) and self._ready(30.0):
            return
        with open(logname, errors="replace") as f:
            out = f.read()[-2000:]
        self.stop()
        raise RuntimeError("leasehold serve did not become ready: " + out)

    def _announced(self, logname: str, scheme: str, within: float) -> bool:
        end = time.monotonic() + within
        pat = re.compile(r"HTTP API on (" + scheme + r"://127\.0\.0\.1:\d+)/v1/")
        while time.monotonic() < end:
            with open(logname, errors="replace") as f:
                m = pat.search(f.read())
            if m:
                self.url = m.group(1)
                return True
            if self.proc is not None and self.proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False

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

    def pause(self) -> None:
        """SIGSTOP the server (returning once it has stopped): it accepts
        connections (the kernel does) and answers nothing."""
        assert self.proc is not None
        sigstop(self.proc.pid)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()  # a stopped process does not act on SIGTERM
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_IGNORE_ABORTED = """process.on('uncaughtException', function (err) {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    console.error('ignored a request aborted by its client');
    return;
  }
  console.error(err);
  process.exit(7);
});
"""


class Dynalite:
    """A private dynalite (the DynamoDB API of $LEASEHOLD_TEST_DYNALITE, run
    by node) on a free loopback port, for a test that stops it (``pause``)
    without touching the shared one. ``url(table)`` is its dynamodb:// URL.
    As scripts/engines.sh does, a preload script ignores the error dynalite
    would exit on when a client gives up on a request (here: every timeout)."""

    def __init__(self) -> None:
        cli, node = os.environ.get("LEASEHOLD_TEST_DYNALITE", ""), shutil.which("node")
        if not cli or not os.path.isfile(cli) or node is None:
            what = "$LEASEHOLD_TEST_DYNALITE (dynalite's cli.js: scripts/engines.sh start) and node"
            engines.missing(what)
        self.dir = tempfile.mkdtemp(prefix="leasehold-py-dynalite-")
        preload = os.path.join(self.dir, "ignore-aborted.js")
        with open(preload, "w") as f:
            f.write(_IGNORE_ABORTED)
        self.proc: Optional[subprocess.Popen] = None
        logname = os.path.join(self.dir, "dynalite.log")
        for _ in range(5):  # a port taken between picking and binding: pick again
            self.port = quiet_port()
            log = open(logname, "wb")
            self.proc = subprocess.Popen([node, "--require", preload, cli, "--port", str(self.port), "--host", "127.0.0.1",
                                          "--createTableMs", "50"],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            log.close()
            if self._ready(logname, 30.0):
                return
            self.proc.kill()
            self.proc.wait()
        self.stop()
        raise RuntimeError("dynalite did not start")

    def _ready(self, logname: str, within: float) -> bool:
        """Ready once it says it listens on its port (it exits if the port was taken)."""
        end = time.monotonic() + within
        want = f"listening at: http://127.0.0.1:{self.port}"
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            with open(logname, errors="replace") as f:
                if want in f.read():
                    return True
            time.sleep(0.05)
        return False

    def url(self, table: str) -> str:
        return f"dynamodb://{table}?endpoint=http://127.0.0.1:{self.port}&region=us-east-1"

    def pause(self) -> None:
        assert self.proc is not None
        sigstop(self.proc.pid)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def answering_late(f: Callable[..., Any], at: float) -> Callable[..., Any]:
    """``f``, whose answer comes back at ``at`` (on ``time.monotonic()``): a slow network."""
    def late(*args: Any, **kw: Any) -> Any:
        out = f(*args, **kw)
        time.sleep(max(at - time.monotonic(), 0))
        return out
    return late


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
