"""The client of a leasehold server (``leasehold serve``) over its HTTP API."""

from __future__ import annotations

import abc
import base64
import os
import random
import ssl
import time
from typing import Any, Callable, Dict, List, Optional

from . import _permits, errors
# ANSWER_GRACE and RETURN_MARGIN stay importable from here, where they were defined.
from ._core import (ANSWER_GRACE, DEFAULT_TTL, MIN_REQUEST, RETURN_MARGIN, ClientBase, Data, ElectionBase,
                    WaitCallback, _call_window, _random_id, _with_request_id, refuse_dynamodb_options)
from ._http import Transport, name_path
from ._log import log
from .lease import Lease, LeaseInfo, LostCallback
from .lock import Lock, make_lock
from .records import Records

LONG_POLL = 30.0
"""Seconds of one long-poll; longer waits repeat it with the same request id (as the Go store does)."""

_SCHEMES: Dict[str, Callable[..., ClientBase]] = {}
"""The clients ``Client(url)`` returns instead for other URLs, by the URL's
prefix: the package (``__init__.py``) adds ``"dynamodb:"``, the DynamoDB
client, which this module does not import."""


def _data_members(data: Data) -> Dict[str, str]:
    if data is None:
        return {}
    if isinstance(data, str):
        return {"data": data}
    if not isinstance(data, (bytes, bytearray)):
        raise errors.InvalidError("data", f"must be bytes or str, not {type(data).__name__}")
    try:
        return {"data": bytes(data).decode("utf-8")}
    except UnicodeDecodeError:
        return {"data_base64": base64.b64encode(bytes(data)).decode("ascii")}


def _ms(seconds: float) -> int:
    """Seconds to whole milliseconds, rounded up (a TTL is never sent shorter than asked)."""
    ms = int(seconds * 1000)
    return ms + 1 if ms < seconds * 1000 else ms


class Client(ClientBase, metaclass=abc.ABCMeta):
    """Takes leases, permits, leadership and records from a leasehold server.

    ``Client("http://127.0.0.1:7070", token=None)``: ``token`` is the bearer
    token (default: ``$LEASEHOLD_AUTH_TOKEN``, if set). ``owner`` is the
    identity written on every grant (default ``host/pid/random``, as the
    Go client). ``timeout`` (seconds) bounds every request besides the time
    it asks the server to wait, and so every call without a timeout of its
    own (``try_acquire``, ``get``, ``release``, ...); a call given one
    (``acquire(timeout=T)``) returns within ``T + 0.5`` s (``ANSWER_GRACE``),
    and a renewal is bounded by the time left before the lease's deadline.
    ``rho`` and ``eps`` are the drift allowance
    of the local deadline: ``t0 + ttl·(1−rho) − eps`` (defaults 1% and 5 ms).
    ``ssl_context`` verifies an https:// server (default: the system's CAs;
    build one with ``ssl.create_default_context(cafile=...)`` for a private
    CA, and ``load_cert_chain`` on it for mutual TLS).

    ``Client("dynamodb://TABLE?region=...&endpoint=...")`` returns a
    ``DynamoDBClient`` instead: leases directly on the DynamoDB store's
    table (see ``leasehold.dynamodb``; it needs boto3). Its keywords,
    ``boto_client``, ``session``, ``region_name``, ``endpoint_url`` and
    ``config``, are typed here too; with a server's URL they raise
    ``InvalidError``.

    Safe for use from several threads; make one per owner identity.
    """

    def __new__(cls, url: str, *args: Any, **kw: Any) -> Any:
        # Client("dynamodb://TABLE?...") is the DynamoDB client (needs boto3), made
        # here whole: Python does not run __init__ again on what is no subclass of Client.
        if cls is Client and isinstance(url, str):
            for prefix, make in _SCHEMES.items():
                if url[:len(prefix)].lower() == prefix:  # schemes are case-insensitive (RFC 3986)
                    return make(url, *args, **kw)
        return super().__new__(cls)

    @classmethod
    def __subclasshook__(cls, sub: type) -> Any:
        # DynamoDBClient derives from ClientBase, not from Client (neither client's module
        # imports the other's), and is still a Client to isinstance and issubclass.
        if cls is Client and sub is not ClientBase and issubclass(sub, ClientBase):
            return True
        return NotImplemented

    def __init__(self, url: str, token: Optional[str] = None, *, owner: Optional[str] = None,
                 timeout: float = 10.0, rho: float = 0.01, eps: float = 0.005,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 boto_client: Any = None, session: Any = None, region_name: Optional[str] = None,
                 endpoint_url: Optional[str] = None, config: Any = None) -> None:
        # The DynamoDB client's keywords, typed here too: Client("dynamodb://...", session=...)
        # makes a DynamoDBClient (__new__), and a type checker reads this signature.
        refuse_dynamodb_options(boto_client=boto_client, session=session, region_name=region_name,
                                endpoint_url=endpoint_url, config=config)
        if token is None:
            token = os.environ.get("LEASEHOLD_AUTH_TOKEN") or None
        self._init_common(owner, timeout, rho, eps)
        self._t = Transport(url, token, timeout, ssl_context)
        self._records = Records(self._t)

    def __repr__(self) -> str:  # never the token, nor a password of the URL
        return f"<leasehold.Client {self._t.safe_url!r} owner={self.owner!r} timeout={self.timeout}>"

    @property
    def records(self) -> Records:
        """Versioned records: get, put, delete, add, txn, update."""
        return self._records

    def close(self) -> None:
        """Close idle connections. Leases are not released (they expire after their TTL)."""

    # --- helpers ---

    def _renew(self, name: str, owner: str, token: int, ttl: float, timeout: Optional[float], *,
               secret: str = "") -> None:
        body: Dict[str, Any] = {"owner": owner, "token": token, "ttl_ms": _ms(ttl)}
        if secret:
            body["secret"] = secret
        self._t.request("POST", name_path("v1/leases", name, "renew"), body, name=name,
                        timeout=self._bounded(timeout))

    def _release(self, name: str, owner: str, token: int, *, secret: str = "",
                 timeout: Optional[float] = None) -> None:
        body: Dict[str, Any] = {"owner": owner, "token": token}
        if secret:
            body["secret"] = secret
        self._t.request("POST", name_path("v1/leases", name, "release"), body, name=name,
                        timeout=self._bounded(timeout))

    def _post_acquire(self, path: str, body: Dict[str, Any], name: str, wait: float,
                      timeout: Optional[float] = None) -> LeaseInfo:
        if wait > 0:
            body = dict(body, wait_ms=max(int(wait * 1000), 1))
        try:
            _, _, j = self._t.request("POST", path, body, name=name, wait=wait, timeout=timeout)
        except errors.UnreachableError as e:
            raise _with_request_id(e, body["request_id"])
        return LeaseInfo.from_json(j)

    # --- leases ---

    def try_acquire(self, name: str, ttl: float = DEFAULT_TTL, *, data: Data = None,
                    request_id: Optional[str] = None, keepalive: bool = True,
                    on_lost: Optional[LostCallback] = None) -> Lease:
        """Make one attempt to take the lease ``name`` for ``ttl`` seconds.

        Raises ``HeldError`` (with the holder's owner, token and remaining time)
        if someone else holds it, ``InvalidError`` for bad input (nothing is
        changed). Any other error (``UnreachableError``, a 5xx) leaves it unknown
        whether the server granted the lease: such a grant expires after its
        TTL, or a retry with the same ``request_id`` gets it back
        (``Unreachable.request_id`` names it, also when this call made it
        up). The client's ``timeout`` bounds the call. With
        ``keepalive=False`` nobody renews the lease: it is lost at its deadline.
        """
        self._check_ttl(ttl)
        rid = request_id or _random_id()
        body = dict({"owner": self.owner, "ttl_ms": _ms(ttl), "request_id": rid}, **_data_members(data))
        t0 = time.monotonic()
        info = self._post_acquire(name_path("v1/leases", name, "acquire"), body, name, 0)
        return Lease(self, info, self.owner, ttl, rid, t0, keepalive, on_lost)

    def acquire(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
                data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
                on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Lease:
        """Take the lease ``name``, waiting in the server's FIFO queue.

        It waits with long-polls of at most 30 s repeated with one request id
        (so a lost answer never makes it wait behind its own grant), for at
        most ``timeout`` seconds (None: without end); when the time is up it
        raises ``HeldError`` with the last holder (or the last error, such as
        ``UnreachableError``, if the last attempt failed). ``UnreachableError``, 503 and 429
        answers are retried with jittered backoff; ``InvalidError``,
        ``UnauthorizedError`` and ``ForbiddenError`` are raised at once. ``on_wait``
        is called with the first ``HeldError`` before waiting. Every request is
        bounded by the time left, so the call returns within ``timeout`` +
        0.5 s (``ANSWER_GRACE``) however the server or network hangs. If a
        grant may have raced with giving up and there is time left, it is
        asked for once more (same request id) and released; otherwise the
        ``UnreachableError`` names the ``request_id``: retry with it to get that
        grant, or it expires after its TTL.
        """
        self._check_ttl(ttl)
        rid = request_id or _random_id()
        body = dict({"owner": self.owner, "ttl_ms": _ms(ttl), "request_id": rid}, **_data_members(data))
        path = name_path("v1/leases", name, "acquire")
        return self._wait_grant(path, body, name, ttl, timeout, keepalive, on_lost, on_wait)

    def lease(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
              data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
              on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Lease:
        """``acquire`` for a ``with`` block: ``with client.lease("jobs/nightly", ttl=30) as lease: ...``.
        The lease is released when the block ends; see ``Lease``."""
        return self.acquire(name, ttl, timeout, data=data, request_id=request_id, keepalive=keepalive,
                            on_lost=on_lost, on_wait=on_wait)

    def lock(self, name: str, ttl: float = DEFAULT_TTL, blocking_timeout: Optional[float] = None, *,
             data: Data = None, on_lost: Optional[LostCallback] = None, timeout: None = None) -> Lock:
        """A reusable lock on ``name`` shaped like redis-py's (see ``leasehold.lock.Lock``):
        ``ttl`` is a grant's time to live, ``blocking_timeout`` how long ``acquire``
        waits (None: without end). Nothing is sent until ``acquire``. ``timeout=`` is
        refused with ``InvalidError``: redis-py's ``timeout`` is the TTL, threading's a wait."""
        return make_lock(self, name, ttl, blocking_timeout, data, on_lost, timeout)

    def _wait_grant(self, path: str, body: Dict[str, Any], name: str, ttl: float, timeout: Optional[float],
                    keepalive: bool, on_lost: Optional[LostCallback], on_wait: Optional[WaitCallback]) -> Lease:
        end, hard = _call_window(timeout)  # no request runs past hard

        def left(floor: float = 0.0) -> Optional[float]:  # a request's timeout: None for the default
            return None if hard is None else max(hard - time.monotonic(), floor)

        last: Optional[errors.LeaseholdError] = None
        unknown = False  # an attempt's outcome was unknown: a grant may exist
        # A wait of 1 s or more (a lease's or a semaphore's) that ran out
        # keeps its place in the server's queue for 5 s (docs/http-api.md):
        # giving up gives it up.
        kept = False
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
                        self._reclaim(path, body, name, hard)
                    if isinstance(last, errors.UnreachableError):
                        raise _with_request_id(last, body["request_id"])
                    raise last if last is not None else errors.HeldError(name)
                wait = min(wait, max(end - now, 0.0))
                req_timeout = min(self.timeout + wait, hard - now)
            t0 = time.monotonic()
            try:
                info = self._post_acquire(path, dict(body), name, wait, req_timeout)
            except errors.HeldError as e:
                if first:
                    log.info("waiting for %r: held by %r (token %d, %.3fs left)", name, e.owner, e.token, e.remaining)
                    if on_wait is not None:
                        on_wait(e)
                kept = wait >= 1.0  # a lease's or a semaphore's place
                first, last, unknown = False, e, False
                continue
            except (errors.UnreachableError, errors.UnavailableError, errors.RateLimitedError, errors.ProblemError) as e:
                if isinstance(e, errors.ProblemError) and e.status < 500 and not isinstance(e, errors.RateLimitedError):
                    raise
                first, last, unknown = False, e, True
                fails += 1
                pause = min(2.0, 0.05 * 2 ** min(fails, 6)) * (0.5 + random.random() / 2)
                if isinstance(e, errors.ProblemError) and e.retry_after:
                    pause = max(pause, e.retry_after / 4)
                if end is not None:
                    pause = min(pause, max(end - time.monotonic(), 0.0))
                log.warning("acquire %r: attempt %d failed: %s; retrying in %.3fs", name, fails, e, pause)
                time.sleep(pause)
                continue
            if time.monotonic() - t0 > ttl / 3:
                # Granted at some moment of a long wait: renew to know the deadline afresh.
                t0 = time.monotonic()
                try:
                    self._renew(info.name, self.owner, info.token, ttl, left(MIN_REQUEST), secret=info.secret)
                except errors.NotHeldError:
                    first = False
                    continue
                except errors.LeaseholdError:
                    self._quiet_release(info.name, info.token, info.secret, left(MIN_REQUEST))
                    first = False
                    continue
            if not first:
                log.info("acquired %r (token %d) after waiting %.3fs", name, info.token, time.monotonic() - started)
            return Lease(self, info, self.owner, ttl, body["request_id"], t0, keepalive, on_lost)

    def _quiet_release(self, name: str, token: int, secret: str, timeout: Optional[float] = None) -> None:
        try:
            self._release(name, self.owner, token, secret=secret, timeout=timeout)
        except errors.LeaseholdError as e:  # it expires after its TTL
            log.debug("release of %r (token %d), a grant not handed out, failed: %s", name, token, e)

    def _reclaim(self, path: str, body: Dict[str, Any], name: str, hard: float) -> None:
        """Release a grant that may have raced with giving up. For a lease, a
        give-up (``give_up``): the server gives up the place kept in the queue and
        releases the grant the request id holds, and never takes the lease (a
        plain try took it when it had become free by the time a loaded server
        answered). For a semaphore, a try with the same request id, which gets
        exactly that grant back, if it exists, released here. Only in the time
        left before ``hard``: else the caller's error names the request id."""
        if hard - time.monotonic() < MIN_REQUEST:
            return
        b = dict(body)
        lease = path.startswith("/v1/leases/")
        if lease:
            b["give_up"] = True
        try:
            info = self._post_acquire(path, b, name, 0, min(self.timeout, hard - time.monotonic()))
        except errors.LeaseholdError as e:
            log.debug("acquire %r: looking for a grant that raced with giving up: %s", name, e)
            return
        left = hard - time.monotonic()
        if not lease and left < MIN_REQUEST:  # no time to give it back within the call's bound
            log.debug("acquire %r: a permit that raced with giving up (token %d) expires after its TTL", name, info.token)
        elif not lease:
            self._quiet_release(info.name, info.token, info.secret, left)

    def get(self, name: str) -> LeaseInfo:
        """The live lease ``name`` with its queued ``waiters``; raises ``NotFoundError``."""
        _, _, j = self._t.request("GET", name_path("v1/leases", name), name=name)
        return LeaseInfo.from_json(j)

    def list(self, prefix: str = "") -> List[LeaseInfo]:
        """The live leases whose names start with ``prefix``, sorted by name. The
        server answers in pages (of up to 10,000); this asks for each in turn
        (``after`` the last name of the page before) until there are no more."""
        out: List[LeaseInfo] = []
        after = ""
        while True:
            query = {"prefix": prefix} if prefix else {}
            if after:
                query["after"] = after
            _, _, j = self._t.request("GET", "/v1/leases", query=query or None)
            out.extend(LeaseInfo.from_json(x) for x in j.get("leases", []))
            nxt = j.get("next") or ""
            if not nxt:
                return out
            if nxt <= after:
                raise errors.UnreachableError(f"leasehold server: malformed answer to GET /v1/leases: next {nxt!r} does not follow {after!r}")
            after = nxt

    def force_release(self, name: str) -> LeaseInfo:
        """Admin only: free ``name`` whoever holds it; returns the grant it ended,
        raises ``NotFoundError`` if none was live. The holder learns at its next renewal."""
        _, _, j = self._t.request("POST", name_path("v1/leases", name, "force-release"), name=name)
        return LeaseInfo.from_json(j)

    # --- semaphores and elections ---

    def semaphore(self, name: str, permits: int) -> "Semaphore":
        """At most ``permits`` holders of ``name`` at once (permit I is the lease ``name/permit/I``,
        shared with Go's ``Semaphore`` and ``leasehold run --permits``)."""
        return Semaphore(self, name, permits)

    def election(self, name: str) -> "Election":
        """The election ``name``: a lease whose token is the leader's term."""
        return Election(self, name)


class Semaphore:
    """A counting semaphore on the server. Each permit is a lease (``Lease.permit``
    is its index); release it with ``Lease.release``. Waiters wait in the server's
    queue of the semaphore, in arrival order (in proxy mode, ``serve --store``,
    the proxy retries instead, not in arrival order)."""

    def __init__(self, client: Client, name: str, permits: int) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= 1024:
            raise errors.InvalidError("permits", f"{permits!r} is outside [1, 1024]")
        self._c, self.name, self.permits = client, name, permits

    def _body(self, ttl: float, data: Data, request_id: Optional[str]) -> Dict[str, Any]:
        self._c._check_ttl(ttl)
        return dict({"owner": self._c.owner, "permits": self.permits, "ttl_ms": _ms(ttl),
                     "request_id": request_id or _random_id()},
                    **_data_members(_permits.permit_data(self.permits, data)))

    def _verify(self, lease: Lease, hard: Optional[float]) -> Lease:
        return _permits.verify_permit(lease, self.name, self.permits, self._c.get, self._c.list, hard=hard)

    def try_acquire(self, ttl: float = DEFAULT_TTL, *, data: Data = None, request_id: Optional[str] = None,
                    keepalive: bool = True, on_lost: Optional[LostCallback] = None) -> Lease:
        """One attempt at a permit; raises ``HeldError`` (the permit that expires first, and ``permits``) when all are held."""
        body = self._body(ttl, data, request_id)
        t0 = time.monotonic()
        info = self._c._post_acquire(name_path("v1/semaphores", self.name, "acquire"), body, self.name, 0)
        return self._verify(Lease(self._c, info, self._c.owner, ttl, body["request_id"], t0, keepalive, on_lost),
                            t0 + self._c.timeout)

    def acquire(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                request_id: Optional[str] = None, keepalive: bool = True,
                on_lost: Optional[LostCallback] = None) -> Lease:
        """Wait (at most ``timeout`` seconds; None: without end) for a permit, as ``Client.acquire`` waits."""
        body = self._body(ttl, data, request_id)
        hard = _call_window(timeout)[1]  # the wait's own bound: the name check ends by it too
        return self._verify(self._c._wait_grant(name_path("v1/semaphores", self.name, "acquire"), body, self.name,
                                                ttl, timeout, keepalive, on_lost, None), hard)


class Election(ElectionBase, metaclass=abc.ABCMeta):
    """Leader election: campaign by acquiring the election's lease (waiting in the
    FIFO queue); the lease's token is the term, greater for every new leader.
    Resign with ``Lease.release``; leadership ends when the lease is lost."""

    _c: Client

    @classmethod
    def __subclasshook__(cls, sub: type) -> Any:
        # DirectElection (DynamoDB's) derives from ElectionBase, and is still an Election.
        if cls is Election and sub is not ElectionBase and issubclass(sub, ElectionBase):
            return True
        return NotImplemented

    def campaign(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                 on_lost: Optional[LostCallback] = None) -> Lease:
        """Become leader (``data``, an address say, tells followers where); returns the lease."""
        return self._c.acquire(self.name, ttl, timeout, data=data, on_lost=on_lost)

    def leader(self) -> Optional[LeaseInfo]:
        """The current leader (with ``term``), or None when there is none."""
        try:
            _, _, j = self._c._t.request("GET", name_path("v1/elections", self.name, "leader"), name=self.name)
        except errors.NotFoundError:
            return None
        return LeaseInfo.from_json(j)
