"""Leases directly on DynamoDB for asyncio. There is no asyncio AWS client in the
standard library (aiobotocore is a separate package): each DynamoDB call of
``leasehold.DynamoDBClient`` runs in a worker thread of this client's own pool,
and the Lease it grants is then kept by the event loop (renewals are calls in
the pool too). A thread cannot be interrupted: a cancelled acquire (its
await cancelled, or the client closed) tells its thread to stop polling,
which it does between attempts (at most one DynamoDB request later), and
a grant that thread still gets after the cancellation is released as soon
as it arrives."""

from __future__ import annotations

import asyncio
import contextvars
import concurrent.futures
import functools
import threading
from typing import Any, Callable, Dict, List, Optional, TypeVar

from .. import _cancel, errors
from .. import lease as sync_lease
from .._core import DEFAULT_TTL, ClientConfig, Data, WaitCallback
from .._dynamodb_recipes import DirectSemaphore
from .._dynamodb_url import parse_url
from .._log import log
from ..dynamodb import DynamoDBClient as BlockingDynamoDBClient
from ..lease import LeaseInfo
from .lease import Lease, LostCallback
from .lock import Lock, make_lock

T = TypeVar("T")
POOL_THREADS = 8
"""Worker threads of a client's pool: concurrent DynamoDB calls beyond this wait for one."""


def _release_late(f: "concurrent.futures.Future[sync_lease.Lease]") -> None:
    """A grant made after its call was cancelled: release it (in the worker thread)."""
    if f.cancelled() or f.exception() is not None:
        return
    lease = f.result()
    try:
        lease.release()
        log.info("acquire %r was cancelled: released its late grant (token %d)", lease.name, lease.token)
    except errors.LeaseholdError as e:
        log.warning("acquire %r was cancelled: the release of its late grant (token %d) failed: %s; "
                    "it expires after its TTL", lease.name, lease.token, e)


class DynamoDBClient(ClientConfig):
    """``leasehold.DynamoDBClient`` for asyncio (what ``leasehold.aio.Client("dynamodb://...")``
    returns), its calls run in worker threads. The constructor sends nothing (the URL is
    checked at once); the blocking client, boto3 and the table check come with the first call."""

    def __init__(self, url: str, token: Optional[str] = None, *, owner: Optional[str] = None,
                 timeout: float = 10.0, rho: float = 0.01, eps: float = 0.005, boto_client: Any = None,
                 session: Any = None, region_name: Optional[str] = None, endpoint_url: Optional[str] = None,
                 config: Any = None) -> None:
        self._init_common(owner, timeout, rho, eps)
        parse_url(url)
        self._url = url
        self._make = functools.partial(BlockingDynamoDBClient, url, token, owner=self.owner, timeout=timeout,
                                       rho=rho, eps=eps, boto_client=boto_client, session=session,
                                       region_name=region_name, endpoint_url=endpoint_url, config=config)
        self._sync: Optional[BlockingDynamoDBClient] = None
        self._pool = concurrent.futures.ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="leasehold-dynamodb")
        self._making: Optional["asyncio.Future[BlockingDynamoDBClient]"] = None
        # The grants under way: their cancel flags (close sets them) and their threads' futures.
        self._polling: Dict[threading.Event, "concurrent.futures.Future[sync_lease.Lease]"] = {}
        self._polling_mu = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<leasehold.aio.DynamoDBClient {self._url!r} owner={self.owner!r} timeout={self.timeout}>"

    async def _blocking(self) -> BlockingDynamoDBClient:
        if self._sync is not None:
            return self._sync
        if self._making is None:  # one construction, whoever calls first
            self._making = asyncio.wrap_future(self._submit(self._make))
        try:
            self._sync = await asyncio.shield(self._making)
        except BaseException:
            if self._making.done():
                self._making = None  # try again at the next call
            raise
        return self._sync

    async def _run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        # In the caller's context: its call's bound (leasehold._bound) holds in the worker too.
        ctx = contextvars.copy_context()
        return await asyncio.wrap_future(self._submit(lambda: ctx.run(fn, *args, **kw)))

    def _submit(self, fn: Callable[[], T]) -> "concurrent.futures.Future[T]":
        try:
            return self._pool.submit(fn)
        except RuntimeError:  # the pool has shut down
            raise errors.LeaseholdError("leasehold.aio.DynamoDBClient is closed (close() ends its threads): "
                                        "make a new client") from None

    async def _grant(self, call: Callable[[BlockingDynamoDBClient], Callable[..., sync_lease.Lease]],
                     keepalive: bool, on_lost: Optional[LostCallback], **kw: Any) -> Lease:
        sync = await self._blocking()
        stop = threading.Event()  # set: the worker stops polling (_cancel)
        fn = call(sync)

        def work() -> sync_lease.Lease:  # in the worker thread
            return _cancel.run(stop, fn, keepalive=False, **kw)
        cf = self._submit(work)
        with self._polling_mu:
            self._polling[stop] = cf
        cf.add_done_callback(lambda _: self._done_polling(stop))
        try:
            sl = await asyncio.wrap_future(cf)
        except asyncio.CancelledError:
            stop.set()
            cf.add_done_callback(_release_late)
            raise
        sl._hand_over()
        t0 = sl.deadline - self._life(sl.ttl)
        return Lease(self, sl.info, sl.owner, sl.ttl, sl.request_id, t0, keepalive, on_lost)

    def _done_polling(self, stop: threading.Event) -> None:
        with self._polling_mu:
            self._polling.pop(stop, None)

    async def close(self) -> None:
        """Stop the acquires under way and wait for their threads (at most one DynamoDB
        request each; an acquire still awaited raises ``LeaseholdError``, one whose last
        request got the grant keeps it), close the blocking client's connections and end
        the pool's threads. Leases are not released. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        with self._polling_mu:
            polling = dict(self._polling)
        for stop in polling:
            stop.set()
        if polling:  # their threads end within one DynamoDB request (each bounded by timeout)
            await asyncio.gather(*(asyncio.wrap_future(f) for f in polling.values()), return_exceptions=True)
        sync = self._sync
        if sync is not None:
            await self._run(sync.close)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> "DynamoDBClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def records(self) -> Any:
        raise errors.UnsupportedError("records are offered by the lease server only, not directly on DynamoDB")

    # --- what a Lease uses ---

    async def _renew(self, name: str, owner: str, token: int, ttl: float, timeout: Optional[float], *,
                     secret: str = "") -> None:
        sync = await self._blocking()
        await self._run(sync._renew, name, owner, token, ttl, timeout, secret=secret)

    async def _release(self, name: str, owner: str, token: int, *, secret: str = "",
                       timeout: Optional[float] = None) -> None:
        sync = await self._blocking()
        await self._run(sync._release, name, owner, token, secret=secret, timeout=timeout)

    # --- leases ---

    async def try_acquire(self, name: str, ttl: float = DEFAULT_TTL, *, data: Data = None,
                          request_id: Optional[str] = None, keepalive: bool = True,
                          on_lost: Optional[LostCallback] = None) -> Lease:
        """One attempt, as ``leasehold.DynamoDBClient.try_acquire``."""
        return await self._grant(lambda s: functools.partial(s.try_acquire, name, ttl), keepalive, on_lost,
                                 data=data, request_id=request_id)

    async def acquire(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
                      data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
                      on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Lease:
        """Wait (polling DynamoDB in a worker thread), as ``leasehold.DynamoDBClient.acquire``;
        ``on_wait`` is called in the event loop."""
        loop = asyncio.get_running_loop()
        waited: Optional[WaitCallback] = None
        if on_wait is not None:
            cb = on_wait

            def waited(e: errors.HeldError) -> None:  # called in the worker thread
                loop.call_soon_threadsafe(cb, e)
        return await self._grant(lambda s: functools.partial(s.acquire, name, ttl, timeout), keepalive, on_lost,
                                 data=data, request_id=request_id, on_wait=waited)

    def lease(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
              data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
              on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Any:
        """``async with client.lease(name, ttl=30) as lease:`` (or ``await client.lease(...)``)."""
        from .client import LeaseContext
        return LeaseContext(lambda: self.acquire(name, ttl, timeout, data=data, request_id=request_id,
                                                 keepalive=keepalive, on_lost=on_lost, on_wait=on_wait))

    def lock(self, name: str, ttl: float = DEFAULT_TTL, blocking_timeout: Optional[float] = None, *,
             data: Data = None, on_lost: Optional[LostCallback] = None, timeout: None = None) -> Lock:
        """A reusable lock, as ``leasehold.aio.Client.lock``."""
        return make_lock(self, name, ttl, blocking_timeout, data, on_lost, timeout)

    async def get(self, name: str) -> LeaseInfo:
        sync = await self._blocking()
        return await self._run(sync.get, name)

    async def list(self, prefix: str = "") -> List[LeaseInfo]:
        sync = await self._blocking()
        return await self._run(sync.list, prefix)

    async def force_release(self, name: str) -> LeaseInfo:
        raise errors.UnsupportedError("force release is not offered on DynamoDB directly (the Go store has none either)")

    def semaphore(self, name: str, permits: int) -> "Semaphore":
        """At most ``permits`` holders (a lease per permit, ``NAME/permit/I``)."""
        return Semaphore(self, name, permits)

    def election(self, name: str) -> "Election":
        return Election(self, name)


class Semaphore:
    """``DirectSemaphore`` for asyncio (its passes over the permits run in a worker thread)."""

    def __init__(self, client: DynamoDBClient, name: str, permits: int) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= 1024:
            raise errors.InvalidError("permits", f"{permits!r} is outside [1, 1024]")
        self._c, self.name, self.permits = client, name, permits

    async def try_acquire(self, ttl: float = DEFAULT_TTL, *, data: Data = None, request_id: Optional[str] = None,
                          keepalive: bool = True, on_lost: Optional[LostCallback] = None) -> Lease:
        return await self._c._grant(lambda s: functools.partial(DirectSemaphore(s, self.name, self.permits).try_acquire,
                                                                ttl), keepalive, on_lost, data=data,
                                    request_id=request_id)

    async def acquire(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                      request_id: Optional[str] = None, keepalive: bool = True,
                      on_lost: Optional[LostCallback] = None) -> Lease:
        return await self._c._grant(lambda s: functools.partial(DirectSemaphore(s, self.name, self.permits).acquire,
                                                                ttl, timeout), keepalive, on_lost, data=data,
                                    request_id=request_id)


class Election:
    """Leader election on DynamoDB for asyncio (the lease's token is the term)."""

    def __init__(self, client: DynamoDBClient, name: str) -> None:
        self._c, self.name = client, name

    async def campaign(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                       on_lost: Optional[LostCallback] = None) -> Lease:
        return await self._c.acquire(self.name, ttl, timeout, data=data, on_lost=on_lost)

    async def leader(self) -> Optional[LeaseInfo]:
        try:
            info = await self._c.get(self.name)
        except errors.NotFoundError:
            return None
        info.term = info.token
        return info


