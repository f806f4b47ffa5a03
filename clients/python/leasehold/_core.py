"""What the server's client (client.py) and the DynamoDB client (dynamodb.py)
share: the timing constants, the types of data and callbacks, and the helpers
of a call's time and request id. It imports neither transport."""

from __future__ import annotations

import secrets
import time
from typing import Callable, Optional, Tuple, Union

from . import errors

DEFAULT_TTL = 15.0
"""The TTL (seconds) of a lease when none is given, as in Go."""

ANSWER_GRACE = 0.5
"""Seconds a call given a ``timeout`` may run past it: the answer to its
last attempt, and the request that looks for a grant which may have raced
with giving up. ``acquire(timeout=T)`` returns by ``T + ANSWER_GRACE``
whatever the network does; with ``timeout=0`` it makes one attempt of at
most ``ANSWER_GRACE``."""

MIN_REQUEST = 0.05
"""Seconds: a request with less time than this left is not sent."""

RETURN_MARGIN = 0.1
"""Seconds kept back from ``ANSWER_GRACE`` for giving up and returning: the
last request of a call ends this long before ``T + ANSWER_GRACE`` (R17
measured returns 1-4 ms past it when it ended there)."""

Data = Union[bytes, str, None]
WaitCallback = Callable[[errors.Held], None]


def _random_id(n: int = 12) -> str:
    return secrets.token_hex(n)


def _with_request_id(e: errors.Unreachable, rid: str) -> errors.Unreachable:
    """Name the request id of the acquire whose outcome ``e`` leaves unknown
    (in ``e.request_id`` and its message), so the caller can retry with it."""
    if e.request_id is None:
        e.request_id = rid
        e.args = (f"{e.args[0] if e.args else e} (request id {rid!r}: an acquire retried with "
                  f"request_id={rid!r} gets back the grant made for it, if one was)",)
    return e


def _call_window(timeout: Optional[float]) -> Tuple[Optional[float], Optional[float]]:
    """(end, hard) on ``time.monotonic()`` for a call given ``timeout``: it
    stops trying at ``end`` and no request of it runs past ``hard``
    (``end + ANSWER_GRACE - RETURN_MARGIN``); (None, None) without a
    timeout."""
    if timeout is None:
        return None, None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise errors.Invalid("timeout", f"{timeout!r} is not a number of seconds >= 0 (None: wait without end)")
    end = time.monotonic() + timeout
    return end, end + ANSWER_GRACE - RETURN_MARGIN
