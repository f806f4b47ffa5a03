"""``leasehold.Lock`` for asyncio: the same names and rules, with ``await``."""

from __future__ import annotations

import math
import time
from typing import Any, List, Optional, Protocol

from .. import errors
from .._core import DEFAULT_TTL, Data, WaitCallback, _call_window
from ..lease import LeaseInfo
from ..lock import MISREAD_TIMEOUT, check_timeout, waits_forever
from ._permits import verify_lock
from .lease import Lease, LostCallback


class AsyncLockClient(Protocol):
    """What a ``Lock`` uses of an asyncio client."""

    owner: str
    timeout: float

    async def try_acquire(self, name: str, ttl: float = DEFAULT_TTL, *, data: Data = None,
                          request_id: Optional[str] = None, keepalive: bool = True,
                          on_lost: Optional[LostCallback] = None) -> Lease: ...

    async def acquire(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
                      data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
                      on_lost: Optional[LostCallback] = None,
                      on_wait: Optional[WaitCallback] = None) -> Lease: ...

    async def get(self, name: str) -> LeaseInfo: ...

    async def list(self, prefix: str = "") -> List[LeaseInfo]: ...


def make_lock(client: AsyncLockClient, name: str, ttl: float, blocking_timeout: Optional[float], data: Data,
              on_lost: Optional[LostCallback], timeout: None) -> "Lock":
    if timeout is not None:
        raise errors.InvalidError("timeout", MISREAD_TIMEOUT)
    return Lock(client, name, ttl, blocking_timeout, data=data, on_lost=on_lost)


class Lock:
    """A reusable lock (see ``leasehold.Lock``): ``await acquire(blocking=True,
    timeout=None) -> bool``, ``await release()``, ``await locked()``, ``owned()``,
    ``await extend(ttl=None)``, ``check()``, ``token``, ``async with lock:``. Not
    reentrant: an acquire while this Lock holds or acquires raises
    ``InvalidError``; give each task its own Lock."""

    def __init__(self, client: AsyncLockClient, name: str, ttl: float = DEFAULT_TTL,
                 blocking_timeout: Optional[float] = None, *, data: Data = None,
                 on_lost: Optional[LostCallback] = None) -> None:
        if not isinstance(name, str):
            raise errors.InvalidError("name", f"must be a str, not {type(name).__name__}")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
            raise errors.InvalidError("ttl", f"{ttl!r} is not a number of seconds > 0")
        check_timeout("blocking_timeout", blocking_timeout)
        self._c, self.name, self.ttl, self.blocking_timeout = client, name, ttl, blocking_timeout
        self._data, self._on_lost = data, on_lost
        self._lease: Optional[Lease] = None
        self._busy = False

    def __repr__(self) -> str:
        lease = self._lease
        state = f"held, token {lease.token}" if lease is not None and lease.held else "not held"
        return f"<leasehold.aio.Lock {self.name!r} ttl={self.ttl} {state}>"

    @property
    def lease(self) -> Optional[Lease]:
        return self._lease

    @property
    def token(self) -> Optional[int]:
        return self._lease.token if self._lease is not None else None

    def _claim(self) -> None:
        held = self._lease
        if self._busy:
            what = "is being acquired"
        elif held is not None and not held.done.is_set():
            what = f"is already held (token {held.token})"
        else:
            self._busy = True
            return
        raise errors.InvalidError("lock", f"{self.name!r} {what} by this Lock, which is not reentrant: "
                                          "release it first, or make one Lock per task")

    async def _acquire(self, blocking: bool, timeout: Optional[float], forever: bool = False) -> Lease:
        try:
            if not blocking:
                hard: Optional[float] = time.monotonic() + self._c.timeout
                lease = await self._c.try_acquire(self.name, self.ttl, data=self._data, on_lost=self._on_lost)
            else:
                wait = None if forever else self.blocking_timeout if timeout is None else timeout
                hard = _call_window(wait)[1]  # the acquire's own bound: the name check ends by it too
                lease = await self._c.acquire(self.name, self.ttl, wait, data=self._data, on_lost=self._on_lost)
            lease = await verify_lock(lease, self.name, self._c.list, hard=hard)
            self._lease = lease
            return lease
        finally:
            self._busy = False

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
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
            await self._acquire(blocking, timeout, forever)
        except errors.HeldError:
            return False
        return True

    async def release(self) -> None:
        lease, self._lease = self._lease, None
        if lease is None:
            raise errors.NotHeldError(f"lock {self.name!r}: this Lock holds nothing to release")
        lost = lease.error if lease.lost.is_set() or not lease.held else None
        try:
            await lease.release()
        except errors.LostError:
            raise
        except BaseException:
            if self._lease is None and not self._busy:
                self._lease = lease  # the outcome is unknown: release() may be called again
            raise
        if isinstance(lost, errors.LostError):
            raise lost

    async def locked(self) -> bool:
        try:
            await self._c.get(self.name)
        except errors.NotFoundError:
            return False
        return True

    def owned(self) -> bool:
        return self._lease is not None and self._lease.held

    async def extend(self, ttl: Optional[float] = None) -> bool:
        """Renew the current hold now, as ``leasehold.Lock.extend``: the lock's ``ttl`` is unchanged."""
        lease = self._lease
        if lease is None:
            raise errors.NotHeldError(f"lock {self.name!r}: this Lock holds nothing to extend")
        await lease.renew(ttl)
        return True

    def check(self) -> None:
        lease = self._lease
        if lease is None:
            raise errors.NotHeldError(f"lock {self.name!r}: this Lock holds nothing")
        lease.check()

    async def __aenter__(self) -> "Lock":
        self._claim()
        await self._acquire(True, None)  # raises the last HeldError when blocking_timeout runs out
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            await lease.__aexit__(exc_type, exc, tb)
