"""The asyncio client of a leasehold server: ``leasehold.Client``'s API with ``await``."""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from typing import Any, Awaitable, Callable, Dict, Generator, List, Optional

from .. import _permits, errors
from .._core import (DEFAULT_TTL, MIN_REQUEST, ClientConfig, Data, WaitCallback, _call_window, _random_id,
                     _with_request_id, refuse_dynamodb_options)
from .._http import name_path
from ._permits import verify_permit
from .._log import log
from ..client import LONG_POLL, _data_members, _ms
from ..lease import LeaseInfo
from ._http import AsyncTransport
from .lease import Lease, LostCallback, spawn
from .lock import Lock, make_lock
from .records import Records

_SCHEMES: Dict[str, Callable[..., Any]] = {}
"""Clients ``Client(url)`` returns instead for other URLs (``leasehold.aio`` adds ``"dynamodb:"``)."""


async def _as_coroutine(aw: Awaitable[Lease]) -> Lease:
    return await aw


class LeaseContext:
    """What ``client.lease(...)`` returns: ``async with client.lease(name) as lease:``
    acquires, and releases at the end; ``await client.lease(name)`` is the Lease."""

    def __init__(self, acquire: Callable[[], Awaitable[Lease]]) -> None:
        self._acquire = acquire
        self._lease: Optional[Lease] = None

    def __await__(self) -> Generator[Any, None, Lease]:
        return (yield from _as_coroutine(self._acquire()).__await__())

    async def __aenter__(self) -> Lease:
        self._lease = await self._acquire()
        return await self._lease.__aenter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._lease is not None:
            await self._lease.__aexit__(exc_type, exc, tb)


class Client(ClientConfig):
    """``leasehold.Client`` for asyncio: the same constructor and methods, each a
    coroutine (``await client.acquire(...)``), over the standard library's asyncio
    streams. ``Client("dynamodb://...")`` returns ``leasehold.aio.DynamoDBClient``
    (its keywords, ``boto_client``, ``session``, ``region_name``, ``endpoint_url``
    and ``config``, are typed here too; with a server's URL they raise ``InvalidError``).

    A call cancelled while it waits gives its place up: a grant that raced with
    the cancellation is released by a task of its own (the same request id gets
    exactly that grant back), as a call that runs out of ``timeout`` does.
    """

    def __new__(cls, url: str, *args: Any, **kw: Any) -> Any:
        if cls is Client and isinstance(url, str):
            for prefix, make in _SCHEMES.items():
                if url[:len(prefix)].lower() == prefix:
                    return make(url, *args, **kw)
        return super().__new__(cls)

    def __init__(self, url: str, token: Optional[str] = None, *, owner: Optional[str] = None,
                 timeout: float = 10.0, rho: float = 0.01, eps: float = 0.005,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 boto_client: Any = None, session: Any = None, region_name: Optional[str] = None,
                 endpoint_url: Optional[str] = None, config: Any = None) -> None:
        # The DynamoDB client's keywords, typed here too: Client("dynamodb://...", session=...)
        # makes a DynamoDBClient (__new__), and a type checker reads this signature.
        refuse_dynamodb_options(boto_client=boto_client, session=session, region_name=region_name,
                                endpoint_url=endpoint_url, config=config)
        import os
        if token is None:
            token = os.environ.get("LEASEHOLD_AUTH_TOKEN") or None
        self._init_common(owner, timeout, rho, eps)
        self._url = url
        self._t = AsyncTransport(url, token, timeout, ssl_context)
        self._records = Records(self._t)

    def __repr__(self) -> str:
        return f"<leasehold.aio.Client {self._t._enc.safe_url!r} owner={self.owner!r} timeout={self.timeout}>"

    @property
    def records(self) -> Records:
        """Versioned records (``await client.records.get(key)``, ...)."""
        return self._records

    async def close(self) -> None:
        """Nothing to close (a connection per request); leases are not released."""

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- what a Lease uses ---

    async def _renew(self, name: str, owner: str, token: int, ttl: float, timeout: Optional[float], *,
                     secret: str = "") -> None:
        body: Dict[str, Any] = {"owner": owner, "token": token, "ttl_ms": _ms(ttl)}
        if secret:
            body["secret"] = secret
        await self._t.request("POST", name_path("v1/leases", name, "renew"), body, name=name,
                              timeout=self._bounded(timeout))

    async def _release(self, name: str, owner: str, token: int, *, secret: str = "",
                       timeout: Optional[float] = None) -> None:
        body: Dict[str, Any] = {"owner": owner, "token": token}
        if secret:
            body["secret"] = secret
        await self._t.request("POST", name_path("v1/leases", name, "release"), body, name=name,
                              timeout=self._bounded(timeout))

    async def _post_acquire(self, path: str, body: Dict[str, Any], name: str, wait: float,
                            timeout: Optional[float] = None) -> LeaseInfo:
        if wait > 0:
            body = dict(body, wait_ms=max(int(wait * 1000), 1))
        try:
            _, _, j = await self._t.request("POST", path, body, name=name, wait=wait, timeout=timeout)
        except errors.UnreachableError as e:
            raise _with_request_id(e, body["request_id"])
        return LeaseInfo.from_json(j)

    # --- leases ---

    async def try_acquire(self, name: str, ttl: float = DEFAULT_TTL, *, data: Data = None,
                          request_id: Optional[str] = None, keepalive: bool = True,
                          on_lost: Optional[LostCallback] = None) -> Lease:
        """One attempt, as ``leasehold.Client.try_acquire``."""
        self._check_ttl(ttl)
        rid = request_id or _random_id()
        body = dict({"owner": self.owner, "ttl_ms": _ms(ttl), "request_id": rid}, **_data_members(data))
        t0 = time.monotonic()
        info = await self._post_acquire(name_path("v1/leases", name, "acquire"), body, name, 0)
        return Lease(self, info, self.owner, ttl, rid, t0, keepalive, on_lost)

    async def acquire(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
                      data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
                      on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Lease:
        """Wait in the server's FIFO queue, as ``leasehold.Client.acquire`` (within ``timeout`` + 0.5 s)."""
        self._check_ttl(ttl)
        rid = request_id or _random_id()
        body = dict({"owner": self.owner, "ttl_ms": _ms(ttl), "request_id": rid}, **_data_members(data))
        path = name_path("v1/leases", name, "acquire")
        return await self._wait_grant(path, body, name, ttl, timeout, keepalive, on_lost, on_wait)

    def lease(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
              data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
              on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> LeaseContext:
        """``async with client.lease("jobs/nightly", ttl=30) as lease: ...``: acquire, release at the end."""
        return LeaseContext(lambda: self.acquire(name, ttl, timeout, data=data, request_id=request_id,
                                                 keepalive=keepalive, on_lost=on_lost, on_wait=on_wait))

    def lock(self, name: str, ttl: float = DEFAULT_TTL, blocking_timeout: Optional[float] = None, *,
             data: Data = None, on_lost: Optional[LostCallback] = None, timeout: None = None) -> Lock:
        """A reusable lock, as ``leasehold.Client.lock`` (``await lock.acquire()``, ``async with lock:``)."""
        return make_lock(self, name, ttl, blocking_timeout, data, on_lost, timeout)

    async def _wait_grant(self, path: str, body: Dict[str, Any], name: str, ttl: float, timeout: Optional[float],
                          keepalive: bool, on_lost: Optional[LostCallback],
                          on_wait: Optional[WaitCallback]) -> Lease:
        try:
            return await self._wait_grant_inner(path, body, name, ttl, timeout, keepalive, on_lost, on_wait)
        except asyncio.CancelledError:
            # A grant may have raced with the cancellation, or a place be kept in the queue:
            # the same request id gets exactly that back; release it in a task of its own.
            log.info("acquire %r cancelled: giving up its place or grant", name)
            spawn(self._reclaim(path, body, name, time.monotonic() + self.timeout), f"leasehold-reclaim-{name}")
            raise

    async def _wait_grant_inner(self, path: str, body: Dict[str, Any], name: str, ttl: float,
                                timeout: Optional[float], keepalive: bool, on_lost: Optional[LostCallback],
                                on_wait: Optional[WaitCallback]) -> Lease:
        end, hard = _call_window(timeout)

        def left(floor: float = 0.0) -> Optional[float]:
            return None if hard is None else max(hard - time.monotonic(), floor)

        last: Optional[errors.LeaseholdError] = None
        unknown = kept = False
        fails = 0
        first = True
        started = time.monotonic()
        while True:
            now = time.monotonic()
            wait = 0.0 if first else LONG_POLL
            req_timeout: Optional[float] = None
            if end is not None and hard is not None:
                if not first and end - now < 0.001:
                    log.info("gave up acquiring %r after %.3fs (timeout %ss): %s", name, time.monotonic() - started,
                             timeout, last)
                    if unknown or kept:
                        await self._reclaim(path, body, name, hard)
                    if isinstance(last, errors.UnreachableError):
                        raise _with_request_id(last, body["request_id"])
                    raise last if last is not None else errors.HeldError(name)
                wait = min(wait, max(end - now, 0.0))
                req_timeout = min(self.timeout + wait, hard - now)
            t0 = time.monotonic()
            try:
                info = await self._post_acquire(path, dict(body), name, wait, req_timeout)
            except errors.HeldError as e:
                if first:
                    log.info("waiting for %r: held by %r (token %d, %.3fs left)", name, e.owner, e.token, e.remaining)
                    if on_wait is not None:
                        on_wait(e)
                kept = wait >= 1.0
                first, last, unknown = False, e, False
                continue
            except errors.ProblemError as e:
                if e.status < 500 and not isinstance(e, errors.RateLimitedError):
                    raise
                last = e
                pause = self._pause(fails + 1, e.retry_after, end)
                fails, first, unknown = fails + 1, False, True
                log.warning("acquire %r: attempt %d failed: %s; retrying in %.3fs", name, fails, e, pause)
                await asyncio.sleep(pause)
                continue
            except errors.UnreachableError as e:
                last = e
                pause = self._pause(fails + 1, None, end)
                fails, first, unknown = fails + 1, False, True
                log.warning("acquire %r: attempt %d failed: %s; retrying in %.3fs", name, fails, e, pause)
                await asyncio.sleep(pause)
                continue
            if time.monotonic() - t0 > ttl / 3:
                # Granted at some moment of a long wait: renew to know the deadline afresh.
                t0 = time.monotonic()
                try:
                    await self._renew(info.name, self.owner, info.token, ttl, left(MIN_REQUEST), secret=info.secret)
                except errors.NotHeldError:
                    first = False
                    continue
                except errors.LeaseholdError:
                    await self._quiet_release(info.name, info.token, info.secret, left(MIN_REQUEST))
                    first = False
                    continue
            if not first:
                log.info("acquired %r (token %d) after waiting %.3fs", name, info.token, time.monotonic() - started)
            return Lease(self, info, self.owner, ttl, body["request_id"], t0, keepalive, on_lost)

    @staticmethod
    def _pause(fails: int, retry_after: Optional[float], end: Optional[float]) -> float:
        pause: float = min(2.0, 0.05 * 2 ** min(fails, 6)) * (0.5 + random.random() / 2)
        if retry_after:
            pause = max(pause, retry_after / 4)
        if end is not None:
            pause = min(pause, max(end - time.monotonic(), 0.0))
        return pause

    async def _quiet_release(self, name: str, token: int, secret: str, timeout: Optional[float] = None) -> None:
        try:
            await self._release(name, self.owner, token, secret=secret, timeout=timeout)
        except errors.LeaseholdError as e:  # it expires after its TTL
            log.debug("release of %r (token %d), a grant not handed out, failed: %s", name, token, e)

    async def _reclaim(self, path: str, body: Dict[str, Any], name: str, hard: float) -> None:
        """Release a grant that may have raced with giving up (the same request id gets it back)."""
        if hard - time.monotonic() < MIN_REQUEST:
            return
        try:
            info = await self._post_acquire(path, dict(body), name, 0, min(self.timeout, hard - time.monotonic()))
        except errors.LeaseholdError as e:
            log.debug("acquire %r: looking for a grant that raced with giving up: %s", name, e)
            return
        left = hard - time.monotonic()
        if left < MIN_REQUEST:  # no time to give it back within the call's bound: it expires after its TTL
            log.debug("acquire %r: a grant that raced with giving up (token %d) expires after its TTL", name, info.token)
            return
        await self._quiet_release(info.name, info.token, info.secret, left)

    async def get(self, name: str) -> LeaseInfo:
        """The live lease ``name`` with its queued ``waiters``; raises ``NotFoundError``."""
        _, _, j = await self._t.request("GET", name_path("v1/leases", name), name=name)
        return LeaseInfo.from_json(j)

    async def list(self, prefix: str = "") -> List[LeaseInfo]:
        """The live leases whose names start with ``prefix``, sorted by name (every page)."""
        out: List[LeaseInfo] = []
        after = ""
        while True:
            query = {"prefix": prefix} if prefix else {}
            if after:
                query["after"] = after
            _, _, j = await self._t.request("GET", "/v1/leases", query=query or None)
            out.extend(LeaseInfo.from_json(x) for x in j.get("leases", []))
            nxt = j.get("next") or ""
            if not nxt:
                return out
            if nxt <= after:
                raise errors.UnreachableError(f"leasehold server: malformed answer to GET /v1/leases: next {nxt!r} "
                                              f"does not follow {after!r}")
            after = nxt

    async def force_release(self, name: str) -> LeaseInfo:
        """Admin only: free ``name`` whoever holds it; returns the grant it ended."""
        _, _, j = await self._t.request("POST", name_path("v1/leases", name, "force-release"), name=name)
        return LeaseInfo.from_json(j)

    # --- semaphores and elections ---

    def semaphore(self, name: str, permits: int) -> "Semaphore":
        """At most ``permits`` holders of ``name`` (as ``leasehold.Client.semaphore``)."""
        return Semaphore(self, name, permits)

    def election(self, name: str) -> "Election":
        """The election ``name``: a lease whose token is the leader's term."""
        return Election(self, name)


class Semaphore:
    """``leasehold.Semaphore`` for asyncio: waiters wait in the server's queue."""

    def __init__(self, client: Client, name: str, permits: int) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= 1024:
            raise errors.InvalidError("permits", f"{permits!r} is outside [1, 1024]")
        self._c, self.name, self.permits = client, name, permits

    def _body(self, ttl: float, data: Data, request_id: Optional[str]) -> Dict[str, Any]:
        self._c._check_ttl(ttl)
        return dict({"owner": self._c.owner, "permits": self.permits, "ttl_ms": _ms(ttl),
                     "request_id": request_id or _random_id()},
                    **_data_members(_permits.permit_data(self.permits, data)))

    async def _verify(self, lease: Lease, hard: Optional[float]) -> Lease:
        return await verify_permit(lease, self.name, self.permits, self._c.get, self._c.list, hard=hard)

    async def try_acquire(self, ttl: float = DEFAULT_TTL, *, data: Data = None, request_id: Optional[str] = None,
                          keepalive: bool = True, on_lost: Optional[LostCallback] = None) -> Lease:
        """One attempt at a permit; raises ``HeldError`` when all are held."""
        body = self._body(ttl, data, request_id)
        t0 = time.monotonic()
        info = await self._c._post_acquire(name_path("v1/semaphores", self.name, "acquire"), body, self.name, 0)
        return await self._verify(Lease(self._c, info, self._c.owner, ttl, body["request_id"], t0, keepalive,
                                        on_lost), t0 + self._c.timeout)

    async def acquire(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                      request_id: Optional[str] = None, keepalive: bool = True,
                      on_lost: Optional[LostCallback] = None) -> Lease:
        """Wait (at most ``timeout`` seconds; None: without end) for a permit."""
        body = self._body(ttl, data, request_id)
        hard = _call_window(timeout)[1]  # the wait's own bound: the name check ends by it too
        return await self._verify(await self._c._wait_grant(name_path("v1/semaphores", self.name, "acquire"), body,
                                                            self.name, ttl, timeout, keepalive, on_lost, None), hard)


class Election:
    """``leasehold.Election`` for asyncio."""

    def __init__(self, client: Client, name: str) -> None:
        self._c, self.name = client, name

    async def campaign(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                       on_lost: Optional[LostCallback] = None) -> Lease:
        """Become leader; returns the lease (its token is the term)."""
        return await self._c.acquire(self.name, ttl, timeout, data=data, on_lost=on_lost)

    async def leader(self) -> Optional[LeaseInfo]:
        """The current leader (with ``term``), or None when there is none."""
        try:
            _, _, j = await self._c._t.request("GET", name_path("v1/elections", self.name, "leader"),
                                               name=self.name)
        except errors.NotFoundError:
            return None
        return LeaseInfo.from_json(j)
