"""The bound of the call a request is made for.

A call that makes several requests in turn (an acquire of a lock or a
semaphore: the grant, then the name check, and a give-back when the check
fails) sets its bound once with ``within(hard)``; every request made inside,
in this thread or task, ends by it, whatever timeout it is given. Threads
started inside do not see it (a lease's keepalive keeps its own timing)."""

from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Iterator, Optional

from . import errors

MIN_REQUEST = 0.05
"""Seconds: a request with less time than this left is not sent."""

_hard: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar("leasehold_call_bound", default=None)


@contextlib.contextmanager
def within(hard: Optional[float]) -> Iterator[None]:
    """Requests made inside end by ``hard`` (on ``time.monotonic()``; None: no bound),
    or by an outer ``within``'s bound if that is sooner."""
    outer = _hard.get()
    if hard is None or (outer is not None and outer < hard):
        hard = outer
    token = _hard.set(hard)
    try:
        yield
    finally:
        _hard.reset(token)


def cut(timeout: float, what: str) -> float:
    """``timeout`` seconds for a request, cut to the time left before the call's
    bound; ``UnreachableError`` (nothing sent) with less than ``MIN_REQUEST`` left."""
    hard = _hard.get()
    if hard is None:
        return timeout
    left = hard - time.monotonic()
    if left < MIN_REQUEST:
        raise errors.UnreachableError(f"{what}: no time left for a request before the call's bound (timed out; "
                                      "nothing was sent)")
    return min(timeout, left)
