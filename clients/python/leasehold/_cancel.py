"""Stopping a blocking call that polls from another thread.

``leasehold.aio``'s DynamoDB client runs the blocking client's calls in
worker threads; a thread cannot be interrupted, so an ``acquire`` whose
await was cancelled (or whose client was closed) would poll on until its
``timeout``, or without end, and keep the process from exiting (issue 29
red team, item 5). The worker runs such a call with ``run(event, ...)``:
the polling loops (``DynamoDBClient.acquire``, ``DirectSemaphore.acquire``)
check ``cancelled()`` between attempts and sleep with ``sleep()``, which
returns as soon as the event is set. In a thread not run so (every
blocking caller), nothing changes."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, TypeVar

from . import errors

T = TypeVar("T")

_local = threading.local()


class CancelledError(errors.LeaseholdError):
    """A blocking acquire stopped polling because ``leasehold.aio`` cancelled it:
    its await was cancelled, or its client was closed. Whoever awaited a
    cancelled acquire never sees this; an acquire still awaited when its
    client was closed raises it."""


def run(event: threading.Event, fn: Callable[..., T], /, *args: Any, **kw: Any) -> T:
    """``fn(*args, **kw)`` in this thread, stopped between attempts once ``event`` is set."""
    _local.event = event
    try:
        return fn(*args, **kw)
    finally:
        _local.event = None


def _event() -> Optional[threading.Event]:
    ev: Optional[threading.Event] = getattr(_local, "event", None)
    return ev


def cancelled() -> bool:
    """Whether the call this thread runs (under ``run``) was cancelled."""
    ev = _event()
    return ev is not None and ev.is_set()


def sleep(seconds: float) -> None:
    """``time.sleep(seconds)``, ending early when the call is cancelled."""
    ev = _event()
    if ev is None:
        time.sleep(seconds)
    else:
        ev.wait(seconds)


def stop(what: str) -> CancelledError:
    return CancelledError(f"{what}: stopped polling, cancelled by leasehold.aio "
                          "(its await was cancelled, or the client was closed)")
