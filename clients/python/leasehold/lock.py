"""A reusable lock object shaped like redis-py's and python-redis-lock's ``Lock``,
over the leases of either client (the server's or DynamoDB's).

Names are chosen so that nothing reads two ways: ``ttl`` is how long a
grant lives without renewal (redis-py calls it ``timeout``, python-redis-lock
``expire``), ``blocking_timeout`` and ``acquire(timeout=...)`` are how long
an acquire waits (as in ``threading.Lock.acquire`` and python-redis-lock).
``client.lock(name, timeout=...)`` is refused with a message that says so.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, List, Optional, Protocol

from . import _permits, errors
from ._core import DEFAULT_TTL, Data, WaitCallback, _call_window
from .lease import Lease, LeaseInfo, LostCallback

MISREAD_TIMEOUT = ("timeout is not taken here: redis-py's Lock(timeout=) is the time to live, "
                   "threading's acquire(timeout=) is a wait. Give ttl= (seconds a grant lives "
                   "without renewal) and/or blocking_timeout= (seconds acquire waits; None: without end)")


class LockClient(Protocol):
    """What a ``Lock`` uses of a client (``Client`` and ``DynamoDBClient`` both have it)."""

    owner: str
    timeout: float

    def try_acquire(self, name: str, ttl: float = DEFAULT_TTL, *, data: Data = None,
                    request_id: Optional[str] = None, keepalive: bool = True,
                    on_lost: Optional[LostCallback] = None) -> Lease: ...

    def acquire(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
                data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
                on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Lease: ...

    def get(self, name: str) -> LeaseInfo: ...

    def list(self, prefix: str = "") -> List[LeaseInfo]: ...


def check_timeout(field: str, v: Optional[float]) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or not math.isfinite(v):
        raise errors.InvalidError(field, f"{v!r} is not a number of seconds >= 0 (None: wait without end)")


def waits_forever(v: Optional[float]) -> bool:
    """``acquire(timeout=-1)``: wait without end, as ``threading.Lock.acquire`` (other negatives are refused)."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and v == -1


def make_lock(client: LockClient, name: str, ttl: float, blocking_timeout: Optional[float], data: Data,
              on_lost: Optional[LostCallback], timeout: None) -> "Lock":
    """``client.lock(...)`` of both clients: ``timeout=`` is refused (it reads two ways)."""
    if timeout is not None:
        raise errors.InvalidError("timeout", MISREAD_TIMEOUT)
    return Lock(client, name, ttl, blocking_timeout, data=data, on_lost=on_lost)


class Lock:
    """A named lock that can be taken, released and taken again; each hold is a
    new lease (a new, greater fencing token: ``lock.token``). Make it with
    ``client.lock(name, ttl=15, blocking_timeout=None)``.

    - ``acquire(blocking=True, timeout=None) -> bool``: True once held; False
      when someone else still held it after ``timeout`` seconds (None: the
      lock's ``blocking_timeout``; both None: wait without end; -1: wait
      without end, whatever ``blocking_timeout``, as ``threading.Lock.acquire``),
      or at once with ``blocking=False``. Other failures (``UnreachableError``,
      ``InvalidError``, ...) are raised, never turned into False.
    - ``release()``: releases the hold; raises ``NotHeldError`` if this Lock
      holds nothing, ``LostError`` if the hold was lost meanwhile.
    - ``locked()``: whether anyone holds the name (asks the store);
      ``owned()``: whether this Lock holds it now (its local deadline, no request).
    - ``extend(ttl=None)``: renews the current hold now, restarting its TTL
      (the hold's, or ``ttl`` from now on, also for its later renewals); it
      does not add to what is left. As redis-py's and python-redis-lock's
      ``extend``, it changes this hold only: the next ``acquire`` is granted
      for the lock's ``ttl``. Renewal is automatic anyway (a keepalive
      thread at about ttl/3), so this is rarely needed.
    - ``with lock:`` acquires (raising ``HeldError`` when ``blocking_timeout``
      runs out), and releases at the end; if the hold was lost inside the
      block and the block raised nothing, leaving it raises ``LostError``:
      a loss is never silent. Inside, check ``lock.check()`` before
      irreversible steps and pass ``lock.token`` to what you write.

    A Lock holds at most one lease at a time and is not reentrant: acquiring
    it again while it holds raises ``InvalidError`` (waiting for itself would
    never end). Share the client between threads, not the Lock: each thread
    makes its own (``client.lock(name)`` sends nothing).
    """

    def __init__(self, client: LockClient, name: str, ttl: float = DEFAULT_TTL,
                 blocking_timeout: Optional[float] = None, *, data: Data = None,
                 on_lost: Optional[LostCallback] = None) -> None:
        if not isinstance(name, str):
            raise errors.InvalidError("name", f"must be a str, not {type(name).__name__}")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
            raise errors.InvalidError("ttl", f"{ttl!r} is not a number of seconds > 0")
        check_timeout("blocking_timeout", blocking_timeout)
        self._c, self.name, self.ttl, self.blocking_timeout = client, name, ttl, blocking_timeout
        self._data, self._on_lost = data, on_lost
        self._mu = threading.Lock()
        self._lease: Optional[Lease] = None
        self._busy = False  # an acquire of this Lock is under way

    def __repr__(self) -> str:
        lease = self._lease
        state = f"held, token {lease.token}" if lease is not None and lease.held else "not held"
        return f"<leasehold.Lock {self.name!r} ttl={self.ttl} {state}>"

    @property
    def lease(self) -> Optional[Lease]:
        """The ``Lease`` of the current hold (None when this Lock holds nothing)."""
        return self._lease

    @property
    def token(self) -> Optional[int]:
        """The fencing token of the current hold (None when this Lock holds nothing)."""
        lease = self._lease
        return lease.token if lease is not None else None

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        if not isinstance(blocking, bool):
            raise errors.InvalidError("blocking", f"must be True or False, not {blocking!r}")
        forever = waits_forever(timeout)  # -1, as threading.Lock.acquire: without end (not blocking_timeout)
        if forever:
            timeout = None
        check_timeout("timeout", timeout)
        if not blocking and timeout is not None:
            raise errors.InvalidError("timeout", "a non-blocking acquire (blocking=False) takes no timeout")
        self._claim()
        try:
            self._acquire(blocking, timeout, forever)
        except errors.HeldError:
            return False
        return True

    def _claim(self) -> None:
        """Mark an acquire under way; refuse one while this Lock holds or acquires (not reentrant)."""
        with self._mu:
            held = self._lease
            if self._busy:
                what = "is being acquired"
            elif held is not None and not held.done.is_set():
                what = f"is already held (token {held.token})"
            else:
                self._busy = True
                return
        raise errors.InvalidError("lock", f"{self.name!r} {what} by this Lock, which is not reentrant: "
                                     "release it first, or make one Lock per thread")

    def _acquire(self, blocking: bool, timeout: Optional[float], forever: bool = False) -> Lease:
        """Take the lease (the caller checked the arguments and set ``_busy``); raises ``HeldError``."""
        lease: Optional[Lease] = None
        try:
            if not blocking:
                hard: Optional[float] = time.monotonic() + self._c.timeout
                lease = self._c.try_acquire(self.name, self.ttl, data=self._data, on_lost=self._on_lost)
            else:
                wait = None if forever else self.blocking_timeout if timeout is None else timeout
                hard = _call_window(wait)[1]  # the acquire's own bound: the name check ends by it too
                lease = self._c.acquire(self.name, self.ttl, wait, data=self._data, on_lost=self._on_lost)
            got, lease = lease, None  # kept only once the check passed
            lease = _permits.verify_lock(got, self.name, self._c.list, hard=hard)
            return lease
        finally:
            with self._mu:
                self._busy = False
                if lease is not None:
                    self._lease = lease

    def release(self) -> None:
        with self._mu:
            lease, self._lease = self._lease, None
        if lease is None:
            raise errors.NotHeldError(f"lock {self.name!r}: this Lock holds nothing to release")
        lost = lease.error if lease.lost.is_set() or not lease.held else None
        try:
            lease.release()  # raises Lost when the store no longer had it
        except errors.LostError:
            raise
        except BaseException:
            with self._mu:  # the outcome is unknown: release() may be called again
                if self._lease is None and not self._busy:
                    self._lease = lease
            raise
        if isinstance(lost, errors.LostError):
            raise lost

    def locked(self) -> bool:
        try:
            self._c.get(self.name)
        except errors.NotFoundError:
            return False
        return True

    def owned(self) -> bool:
        lease = self._lease
        return lease is not None and lease.held

    def extend(self, ttl: Optional[float] = None) -> bool:
        """Renew the current hold now (for ``ttl`` seconds from now on, default the hold's
        TTL); returns True (never False: a failure raises, ``LostError`` when the hold is
        gone). ``ttl`` stays the hold's for its renewals; the lock's ``ttl``, what the
        next ``acquire`` asks for, is unchanged."""
        lease = self._lease
        if lease is None:
            raise errors.NotHeldError(f"lock {self.name!r}: this Lock holds nothing to extend")
        lease.renew(ttl)
        return True

    def check(self) -> None:
        """Raise ``LostError`` if the hold was lost (``NotHeldError`` if there is none)."""
        lease = self._lease
        if lease is None:
            raise errors.NotHeldError(f"lock {self.name!r}: this Lock holds nothing")
        lease.check()

    def __enter__(self) -> "Lock":
        self._claim()
        self._acquire(True, None)  # raises the last HeldError when blocking_timeout runs out
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        with self._mu:
            lease, self._lease = self._lease, None
        if lease is not None:
            lease.__exit__(exc_type, exc, tb)
