"""A held lease of the asyncio client, kept alive by a task of the event loop."""

from __future__ import annotations

import asyncio
import inspect
import random
import time
import weakref
from typing import Any, Awaitable, Callable, Optional, Protocol, Set, Tuple

from .. import errors
from .._log import log
from ..lease import LeaseInfo, note_loss

LostCallback = Callable[["Lease", errors.LeaseholdError], Any]
"""``on_lost(lease, err)``: a plain function, or a coroutine function (run as a task)."""

_TASKS: Set["asyncio.Task[Any]"] = set()
"""Tasks started here and not done: the event loop keeps only weak references to tasks."""


def spawn(coro: Awaitable[Any], name: str) -> "asyncio.Task[Any]":
    task: "asyncio.Task[Any]" = asyncio.ensure_future(coro)
    task.set_name(name)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return task


async def wait_event(ev: asyncio.Event, seconds: float) -> bool:
    """Whether ``ev`` was set within ``seconds``."""
    try:
        await asyncio.wait_for(ev.wait(), max(seconds, 0.0))
        return True
    except asyncio.TimeoutError:
        return ev.is_set()


class AsyncLeaseClient(Protocol):
    """What a ``Lease`` uses of its client."""

    def _life(self, ttl: float) -> float: ...

    def _check_ttl(self, ttl: float) -> None: ...

    async def _renew(self, name: str, owner: str, token: int, ttl: float, timeout: Optional[float], *,
                     secret: str = "") -> None: ...

    async def _release(self, name: str, owner: str, token: int, *, secret: str = "",
                       timeout: Optional[float] = None) -> None: ...


class Lease:
    """A granted lease, as ``leasehold.Lease`` but for asyncio: ``await renew()``,
    ``await release()``, ``async with``; ``lost`` and ``done`` are ``asyncio.Event``.

    A task of the event loop renews it at about ``ttl/3``, each renewal bounded
    by the time left before the local deadline, and another task declares it
    lost at its deadline (``t0 + ttl·(1−rho) − eps``, ``t0`` read before the
    request). These tasks run only when the loop runs: code that blocks the
    loop (a CPU-bound step, a blocking call) delays the renewal and the loss
    report alike, so check ``held`` (it reads the clock) before irreversible
    steps. Once released or lost a Lease is never held again; leaving an
    ``async with`` block raises its ``LostError`` if it was lost inside and the
    block raised nothing. Nobody keeping a Lease ends its renewals (it is
    garbage-collected, logged as a warning, and expires after its TTL).
    """

    def __init__(self, client: AsyncLeaseClient, info: LeaseInfo, owner: str, ttl: float, request_id: str,
                 t0: float, keepalive: bool = True, on_lost: Optional[LostCallback] = None) -> None:
        self._c = client
        self.name: str = info.name
        self.owner: str = owner
        self.token: int = info.token
        self.request_id: str = request_id
        self.permit: Optional[int] = info.permit
        self.info: LeaseInfo = info
        self.ttl: float = ttl
        self.lost = asyncio.Event()
        """Set when the lease is lost (not when it is released)."""
        self.done = asyncio.Event()
        """Set when the lease is lost or released."""
        self._on_lost = on_lost
        self._err: Optional[errors.LeaseholdError] = None
        self.lost_at: Optional[float] = None
        """When the loss was seen (``time.time()``); None while not lost."""
        self._released = False
        self._rel_mu = asyncio.Lock()
        self._deadline = t0 + client._life(ttl)
        self._stop = asyncio.Event()
        ref = weakref.ref(self)
        log.debug("lease %r granted (token %d, ttl %ss, keepalive %s)", self.name, self.token, ttl, keepalive)
        self._watcher = spawn(_watch(ref, self._stop), f"leasehold-deadline-{self.name}")
        self._keeper: Optional["asyncio.Task[Any]"] = None
        if keepalive:
            self._keeper = spawn(_keepalive(ref, self._stop, t0 + ttl / 3), f"leasehold-keepalive-{self.name}")
        weakref.finalize(self, _abandoned, self.done, self.name, self.token)

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self.lost.is_set() else "released")
        return f"<leasehold.aio.Lease {self.name!r} token={self.token} owner={self.owner!r} ttl={self.ttl} {state}>"

    @property
    def deadline(self) -> float:
        """The local deadline on ``time.monotonic()``."""
        return self._deadline

    @property
    def held(self) -> bool:
        """Whether the lease is known to be held now (checks the deadline now); once False, never True again."""
        if self._err is not None:
            return False
        if time.monotonic() < self._deadline:
            return True
        self._finish(errors.LostError(f"{self.name!r} (token {self.token}): local deadline passed without a "
                                      "confirmed renewal"))
        return False

    @property
    def error(self) -> Optional[errors.LeaseholdError]:
        """None while held; a ``LostError`` or ``ReleasedError`` once ``done`` is set."""
        return self._err

    def check(self) -> None:
        """Raise the ``LostError`` (or ``ReleasedError``) if the lease is no longer held."""
        if not self.held:
            assert self._err is not None
            raise self._err

    def _finish(self, err: errors.LeaseholdError) -> None:
        if self._err is not None:
            return
        self._err = err
        if isinstance(err, errors.LostError):
            self.lost_at = time.time()
        self._stop.set()
        if isinstance(err, errors.LostError):
            log.error("lease %r (token %d) lost: %s", self.name, self.token, err)
            self.lost.set()
        else:
            log.debug("lease %r (token %d): released", self.name, self.token)
        self.done.set()
        if isinstance(err, errors.LostError) and self._on_lost is not None:
            try:
                r = self._on_lost(self, err)
                if inspect.isawaitable(r):
                    spawn(_callback(r, self.name, self.token), f"leasehold-on-lost-{self.name}")
            except Exception:  # a callback's failure must not stop the loss from being seen
                log.exception("on_lost callback of lease %r (token %d) raised (swallowed: the loss stands)",
                              self.name, self.token)

    async def renew(self, ttl: Optional[float] = None) -> None:
        """Renew now (for ``ttl``, default the lease's), as ``leasehold.Lease.renew``."""
        if self._err is not None:
            raise self._err
        if ttl is not None:
            self._c._check_ttl(ttl)
        await self._renew_once(None, ttl)

    async def _renew_once(self, timeout: Optional[float], ttl: Optional[float] = None) -> None:
        t0 = time.monotonic()
        ttl = self.ttl if ttl is None else ttl
        try:
            await self._c._renew(self.name, self.owner, self.token, ttl, timeout, secret=self.info.secret)
        except errors.NotHeldError:
            lerr = errors.LostError(f"renew {self.name!r} (token {self.token}) refused: the server no longer "
                                    "has it for this owner")
            self._finish(lerr)
            raise lerr from None
        if self._err is None and time.monotonic() < self._deadline:
            self.ttl = ttl
            self._deadline = t0 + self._c._life(ttl)
            log.debug("lease %r (token %d) renewed for %ss", self.name, self.token, ttl)
            return
        if self._err is None:
            self._finish(errors.LostError(f"renew {self.name!r} (token {self.token}) confirmed after the "
                                          "local deadline"))
        assert self._err is not None
        raise self._err

    async def _keepalive_step(self, renew_at: float, fails: int) -> Optional[Tuple[float, float, int]]:
        """One turn of the keepalive: (seconds to wait, renew_at, fails), or None when it ends."""
        now, deadline = time.monotonic(), self._deadline
        if self._err is not None or now >= deadline:
            return None  # the watcher reports the loss
        if now < renew_at:
            return min(deadline, renew_at) - now, renew_at, fails
        try:
            await self._renew_once(max(deadline - now, 0.05))  # an answer after the deadline is of no use
            return 0.0, self._deadline - self._c._life(self.ttl) + self.ttl / 3, 0
        except errors.LostError:
            return None
        except Exception as e:  # unknown outcome: try again before the deadline
            fails += 1
            lo, hi = max(self.ttl / 50, 0.001), max(self.ttl / 10, 0.001)
            pause = min(hi, lo * (2 ** min(fails, 10))) * (0.5 + random.random() / 2)
            log.warning("renewal %d of lease %r (token %d) failed: %s; trying again in %.3fs, %.3fs before "
                        "its deadline", fails, self.name, self.token, e, pause,
                        max(deadline - time.monotonic(), 0.0), exc_info=not isinstance(e, errors.LeaseholdError))
            return 0.0, time.monotonic() + pause, fails

    async def release(self) -> None:
        """Stop the keepalive and release the lease, as ``leasehold.Lease.release``
        (a renewal in flight is cancelled, not waited for)."""
        async with self._rel_mu:
            if self._released:
                return
            self._stop.set()
            keeper = self._keeper
            if keeper is not None and keeper is not asyncio.current_task():
                keeper.cancel()
            self._finish(errors.ReleasedError(f"{self.name!r} (token {self.token}) was released"))
            try:
                await self._c._release(self.name, self.owner, self.token, secret=self.info.secret)
            except errors.NotHeldError:
                self._released = True
                raise errors.LostError(f"release {self.name!r} (token {self.token}): the server no longer had "
                                       "it for this owner") from None
            self._released = True

    async def __aenter__(self) -> "Lease":
        if not self.held:
            err = self._err
            what = "was released" if isinstance(err, errors.ReleasedError) else "was lost"
            msg = (f"{self.name!r} (token {self.token}) {what} ({err}): a Lease is one grant and is not taken "
                   "again by an async with block; take a new one for each block")
            raise errors.ReleasedError(msg) if isinstance(err, errors.ReleasedError) else errors.LostError(msg)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        was_lost = self.lost.is_set() or not self.held
        lost_err = self._err
        if exc_type is not None:
            if was_lost:
                note_loss(exc, self.name, self.token, self.lost_at, lost_err)
            try:
                await self.release()
            except errors.LeaseholdError as e:  # not raised: it would mask the block's own exception
                log.warning("release of lease %r (token %d) after its block raised %s failed: %s",
                            self.name, self.token, exc_type.__name__, e)
            return
        try:
            await self.release()
        except errors.LostError:
            if not was_lost:
                raise
        except Exception:
            # The loss wins over a failed release (the server stopped, say):
            # raised here, the release's error is its __context__.
            if was_lost and isinstance(lost_err, errors.LostError):
                raise lost_err
            raise
        if was_lost and isinstance(lost_err, errors.LostError):
            raise lost_err


# The tasks hold the Lease by a weak reference between their turns: a Lease
# nobody keeps is collected, which stops them (see _abandoned).

async def _watch(ref: "weakref.ReferenceType[Lease]", stop: asyncio.Event) -> None:
    while True:
        lease = ref()
        if lease is None or not lease.held:  # held: False once finished, or (finishing it as lost) past the deadline
            return
        left = lease.deadline - time.monotonic()
        del lease
        if await wait_event(stop, left):
            return


async def _keepalive(ref: "weakref.ReferenceType[Lease]", stop: asyncio.Event, renew_at: float) -> None:
    fails = 0
    while not stop.is_set():
        lease = ref()
        if lease is None:
            return
        turn = await lease._keepalive_step(renew_at, fails)
        del lease
        if turn is None:
            return
        pause, renew_at, fails = turn
        if pause > 0 and await wait_event(stop, pause):
            return


async def _callback(r: Awaitable[Any], name: str, token: int) -> None:
    try:
        await r
    except Exception:
        log.exception("on_lost callback of lease %r (token %d) raised (swallowed: the loss stands)", name, token)


def _abandoned(done: asyncio.Event, name: str, token: int) -> None:
    """A Lease was garbage-collected: its tasks end at their next turn, finding it gone
    (nothing of the loop is touched here: a collection may run in another thread)."""
    if not done.is_set():
        log.warning("lease %r (token %d) was garbage-collected while held: nobody renews it now, "
                    "it expires after its TTL", name, token)
