"""Semaphores and elections directly on DynamoDB, over DynamoDBClient's leases.
dynamodb.py imports this module, not the reverse: what the recipes use of
DynamoDBClient is written down here as ``DirectLeases``."""

from __future__ import annotations

import random
import time
from typing import Any, Dict, Iterable, List, Optional, Protocol, Set, Tuple

from . import _cancel, _permits, _validate, errors
from ._bound import within
from ._core import DEFAULT_TTL, Data, ElectionBase, WaitCallback, _call_window, _random_id, _with_request_id
from ._log import log
from .lease import Lease, LeaseInfo, LostCallback


class DirectLeases(Protocol):
    """What the recipes use of DynamoDBClient."""

    timeout: float
    owner: str

    def _granted_to(self, names: List[str], rid: str, end: float) -> Dict[str, int]: ...

    def _release(self, name: str, owner: str, token: int, *, secret: str = "",
                 timeout: Optional[float] = None) -> None: ...

    def _prepare(self, name: str, ttl: float, data: Data, request_id: Optional[str]) -> Tuple[str, int, bytes]: ...

    def _try(self, name: str, rid: str, ttl_ms: int, raw: bytes, keepalive: bool,
             on_lost: Optional[LostCallback], end: float) -> Lease: ...

    def acquire(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
                data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
                on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Lease: ...

    def get(self, name: str) -> LeaseInfo: ...

    def list(self, prefix: str = "") -> List[LeaseInfo]: ...


class DirectSemaphore:
    """A counting semaphore on DynamoDB, as Go's ``Semaphore``: a lease per permit
    (``NAME/permit/I``), tried in random order; waiting polls with jittered backoff."""

    def __init__(self, client: DirectLeases, name: str, permits: int) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= 1024:
            raise errors.InvalidError("permits", f"{permits!r} is outside [1, 1024]")
        _validate.text("name", name, _validate.MAX_NAME)
        self._c, self.name, self.permits = client, name, permits

    def _permit(self, i: int) -> str:
        return f"{self.name}/permit/{i}"

    def _granted(self, rid: str, among: Iterable[int], end: float) -> Dict[int, int]:
        """permit -> token of the live grants among ``among`` to the acquire ``rid``
        (grants whose answers were lost)."""
        names = {self._permit(i): i for i in among}
        return {names[n]: t for n, t in self._c._granted_to(list(names), rid, end).items()}

    def _pass(self, ttl: float, data: Data, rid: str, keepalive: bool, on_lost: Optional[LostCallback],
              end: float, maybe: Set[int]) -> Lease:
        """One pass over the permits, its requests ending by ``end``: first those in
        ``maybe`` (a grant to ``rid`` may exist there, its answer lost: the same
        request id gets it back, so that one acquire never holds two permits), then
        the others in random order. A permit whose attempt's outcome is unknown is
        added to ``maybe``."""
        rest = [i for i in range(self.permits) if i not in maybe]
        random.shuffle(rest)
        soonest: Optional[errors.HeldError] = None
        for i in sorted(maybe) + rest:
            pname = self._permit(i)
            _, ttl_ms, raw = self._c._prepare(pname, ttl, _permits.permit_data(self.permits, data), rid)
            try:
                lease = self._c._try(pname, rid, ttl_ms, raw, keepalive, on_lost, end)
            except errors.HeldError as e:
                maybe.discard(i)  # held by another grant: none of rid's there
                if soonest is None or e.remaining < soonest.remaining:
                    soonest = e
                continue
            except (errors.UnreachableError, errors.RateLimitedError):
                maybe.add(i)
                raise
            maybe.add(i)  # granted: given back on a mismatch, or kept (rid's either way)
            lease.permit = i
            lease.info.permit = i
            return _permits.verify_permit(lease, self.name, self.permits, self._c.get, self._c.list, hard=end)
        assert soonest is not None
        soonest.permits = self.permits
        raise soonest

    def _look(self, rid: str, end: float) -> Set[int]:
        """The permits granted to ``rid`` by an earlier call (the caller retries
        with its request id): one BatchGetItem per 100 permits."""
        return set(self._granted(rid, range(self.permits), end))

    def try_acquire(self, ttl: float = DEFAULT_TTL, *, data: Data = None, request_id: Optional[str] = None,
                    keepalive: bool = True, on_lost: Optional[LostCallback] = None) -> Lease:
        """One pass over the permits, bounded by the client's ``timeout``; raises
        ``HeldError`` (the permit that expires first, with ``permits``) when all are
        held. With ``request_id`` (a retry), a permit granted to it is taken back."""
        rid = request_id or _random_id()
        end = time.monotonic() + self._c.timeout
        try:
            maybe = self._look(rid, end) if request_id is not None else set()
            return self._pass(ttl, data, rid, keepalive, on_lost, end, maybe)
        except errors.UnreachableError as e:
            raise _with_request_id(e, rid)

    def acquire(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                request_id: Optional[str] = None, keepalive: bool = True,
                on_lost: Optional[LostCallback] = None) -> Lease:
        """Wait (at most ``timeout`` seconds; None: without end) for a permit, polling
        with jittered backoff (2 ms to 250 ms) that never sleeps past the first expiry.
        It returns within ``timeout`` + 0.5 s whatever DynamoDB does; an
        ``UnreachableError`` names the request id the attempts used. With
        ``request_id`` (a retry), a permit granted to it is taken back; one that
        an attempt of this call may have got is tried first by each later pass,
        and given back if the call gives up."""
        rid = request_id or _random_id()
        end, hard = _call_window(timeout)
        cap = 0.002
        maybe: Set[int] = set()
        looked = request_id is None
        while True:
            if _cancel.cancelled():  # leasehold.aio: the await was cancelled, or the client closed
                log.info("semaphore %r: acquire was cancelled: stopped polling", self.name)
                raise _cancel.stop(f"semaphore {self.name!r} acquire")
            now = time.monotonic()
            pass_end = now + self._c.timeout if hard is None else min(now + self._c.timeout, hard)
            try:
                if not looked:  # in the call's time, not one pass's: 11 requests for 1,024 permits
                    maybe |= self._look(rid, now + self._c.timeout if hard is None else hard)
                    looked = True
                return self._pass(ttl, data, rid, keepalive, on_lost, pass_end, maybe)
            except (errors.HeldError, errors.UnreachableError, errors.RateLimitedError) as e:
                pause = cap * (0.5 + random.random() / 2)
                if isinstance(e, errors.HeldError):
                    pause = min(pause, e.remaining + 0.001)
                else:
                    log.warning("semaphore %r: attempt failed: %s; retrying in %.3fs", self.name, e, pause)
                cap = min(cap * 2, 0.25)
                if end is not None and hard is not None:
                    left = end - time.monotonic()
                    if left <= 0:
                        if maybe:  # a permit may have been granted to rid: give it back, in the time left
                            self._give_back(rid, maybe, hard)
                        if isinstance(e, errors.UnreachableError):
                            raise _with_request_id(e, rid)
                        raise
                    pause = min(pause, left)
            _cancel.sleep(max(pause, 0.0))

    def _give_back(self, rid: str, maybe: Set[int], hard: float) -> None:
        """Release the permits in ``maybe`` granted to ``rid`` (an acquire that gave
        up after an unknown outcome), only in the time left before ``hard``; else
        they expire after their TTL, and a retry with ``rid`` takes them back."""
        try:
            with within(hard):
                for i, token in self._granted(rid, maybe, hard).items():
                    self._c._release(self._permit(i), self._c.owner, token, timeout=hard - time.monotonic())
        except errors.LeaseholdError as e:
            log.debug("semaphore %r: giving back a permit that raced with giving up: %s", self.name, e)


class DirectElection(ElectionBase):
    """Leader election on DynamoDB: campaign by acquiring the election's lease; its
    token is the term. Resign with ``Lease.release``. Campaigning is as ``Election``'s,
    through the DynamoDB client's acquire."""

    _c: DirectLeases

    def campaign(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                 on_lost: Optional[LostCallback] = None) -> Lease:
        """Become leader (``data``, an address say, tells followers where); returns the lease."""
        return self._c.acquire(self.name, ttl, timeout, data=data, on_lost=on_lost)

    def leader(self) -> Optional[LeaseInfo]:
        """The current leader (``term`` set to its token), or None when there is none."""
        try:
            info = self._c.get(self.name)
        except errors.NotFoundError:
            return None
        info.term = info.token
        return info
