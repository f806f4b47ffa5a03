"""Semaphores and elections directly on DynamoDB, over DynamoDBClient's leases."""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Optional

from . import _validate, errors
from .client import DEFAULT_TTL, Data, Election, _random_id
from .lease import Lease, LeaseInfo, LostCallback

if TYPE_CHECKING:  # pragma: no cover
    from .dynamodb import DynamoDBClient


class DirectSemaphore:
    """A counting semaphore on DynamoDB, as Go's ``Semaphore``: a lease per permit
    (``NAME/permit/I``), tried in random order; waiting polls with jittered backoff."""

    def __init__(self, client: DynamoDBClient, name: str, permits: int) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= 1024:
            raise errors.Invalid("permits", f"{permits!r} is outside [1, 1024]")
        _validate.text("name", name, _validate.MAX_NAME)
        self._c, self.name, self.permits = client, name, permits

    def try_acquire(self, ttl: float = DEFAULT_TTL, *, data: Data = None, request_id: Optional[str] = None,
                    keepalive: bool = True, on_lost: Optional[LostCallback] = None) -> Lease:
        """One pass over the permits; raises ``Held`` (the permit that expires first,
        with ``permits``) when all are held."""
        rid = request_id or _random_id()
        order = list(range(self.permits))
        random.shuffle(order)
        soonest: Optional[errors.Held] = None
        for i in order:
            try:
                lease = self._c.try_acquire(f"{self.name}/permit/{i}", ttl, data=data, request_id=rid,
                                            keepalive=keepalive, on_lost=on_lost)
            except errors.Held as e:
                if soonest is None or e.remaining < soonest.remaining:
                    soonest = e
                continue
            lease.permit = i
            lease.info.permit = i
            return lease
        assert soonest is not None
        soonest.permits = self.permits
        raise soonest

    def acquire(self, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *, data: Data = None,
                request_id: Optional[str] = None, keepalive: bool = True,
                on_lost: Optional[LostCallback] = None) -> Lease:
        """Wait (at most ``timeout`` seconds; None: without end) for a permit, polling
        with jittered backoff (2 ms to 250 ms) that never sleeps past the first expiry."""
        rid = request_id or _random_id()
        end = None if timeout is None else time.monotonic() + timeout
        cap = 0.002
        while True:
            try:
                return self.try_acquire(ttl, data=data, request_id=rid, keepalive=keepalive, on_lost=on_lost)
            except (errors.Held, errors.Unreachable, errors.RateLimited) as e:
                pause = cap * (0.5 + random.random() / 2)
                if isinstance(e, errors.Held):
                    pause = min(pause, e.remaining + 0.001)
                cap = min(cap * 2, 0.25)
                if end is not None:
                    left = end - time.monotonic()
                    if left <= 0:
                        raise
                    pause = min(pause, left)
            time.sleep(max(pause, 0.0))


class DirectElection(Election):
    """Leader election on DynamoDB: campaign by acquiring the election's lease; its
    token is the term. Resign with ``Lease.release``. Campaigning is Election's,
    through the DynamoDB client's acquire."""

    def __init__(self, client: DynamoDBClient, name: str) -> None:
        self._c, self.name = client, name

    def leader(self) -> Optional[LeaseInfo]:
        """The current leader (``term`` set to its token), or None when there is none."""
        try:
            info = self._c.get(self.name)
        except errors.NotFound:
            return None
        info.term = info.token
        return info
