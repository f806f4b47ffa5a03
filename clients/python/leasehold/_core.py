"""What the server's client (client.py) and the DynamoDB client (dynamodb.py)
share: the timing constants, the types of data and callbacks, and the helpers
of a call's time and request id. It imports neither transport."""

from __future__ import annotations

import math
import os
import secrets
import socket
import time
from typing import Any, Callable, Optional, Tuple, TypeVar, Union

from . import _validate, errors
from ._bound import MIN_REQUEST as MIN_REQUEST  # defined beside the call's bound; importable from here

DEFAULT_TTL = 15.0
"""The TTL (seconds) of a lease when none is given, as in Go."""

ANSWER_GRACE = 0.5
"""Seconds a call given a ``timeout`` may run past it: the answer to its
last attempt, and the request that looks for a grant which may have raced
with giving up. ``acquire(timeout=T)`` returns by ``T + ANSWER_GRACE``
whatever the network does; with ``timeout=0`` it makes one attempt of at
most ``ANSWER_GRACE``."""

MIN_TIMEOUT = 0.1
"""Seconds: the least ``timeout`` a client takes (its requests get at least
``MIN_REQUEST``; below this a DynamoDB client's constructor could send none)."""

RETURN_MARGIN = 0.2
"""Seconds kept back from ``ANSWER_GRACE`` for giving up and returning: the
last request of a call ends this long before ``T + ANSWER_GRACE`` (R17
measured returns 1-4 ms past it when it ended there, and once, on a loaded
machine with 0.1 s kept back, 41 ms past the bound)."""

Data = Union[bytes, str, None]
WaitCallback = Callable[[errors.HeldError], None]


def _random_id(n: int = 12) -> str:
    return secrets.token_hex(n)


def _with_request_id(e: errors.UnreachableError, rid: str) -> errors.UnreachableError:
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
        raise errors.InvalidError("timeout", f"{timeout!r} is not a number of seconds >= 0 (None: wait without end)")
    end = time.monotonic() + timeout
    return end, end + ANSWER_GRACE - RETURN_MARGIN


def refuse_dynamodb_options(**given: Any) -> None:
    """The server's clients take the DynamoDB client's keywords (``Client(url, ...)``
    is typed for both, whichever its URL makes): with a server's URL they are refused."""
    for field, v in given.items():
        if v is not None:
            raise errors.InvalidError(field, "is an option of dynamodb:// URLs (the DynamoDB client), "
                                             "not of a leasehold server's URL")


_Self = TypeVar("_Self", bound="ClientBase")


class ClientConfig:
    """What every client (the server's and DynamoDB's, blocking and asyncio) shares:
    the owner, the request timeout, the drift allowance (``rho``, ``eps``) and what follows from them."""

    def _init_common(self, owner: Optional[str], timeout: float, rho: float, eps: float) -> None:
        for field, v in (("timeout", timeout), ("rho", rho), ("eps", eps)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise errors.InvalidError(field, f"must be a number, not {type(v).__name__}")
            if not math.isfinite(v):
                raise errors.InvalidError(field, f"{v} is not a finite number")
        if not (0 <= rho < 1):
            raise errors.InvalidError("rho", f"{rho} is outside [0, 1)")
        if eps < 0:
            raise errors.InvalidError("eps", f"{eps} is negative")
        if timeout < MIN_TIMEOUT:
            raise errors.InvalidError("timeout", f"{timeout}s is below the minimum of {MIN_TIMEOUT}s: every call "
                                                 "needs time for a request and its answer")
        if owner is None:
            owner = f"{socket.gethostname()}/{os.getpid()}/{_random_id(4)}"
            if len(owner.encode()) > 256:
                owner = f"pid-{os.getpid()}/{_random_id(4)}"
        else:
            _validate.text("owner", owner, _validate.MAX_OWNER)
        self.owner: str = owner
        self.rho, self.eps = rho, eps
        self.timeout: float = timeout

    # --- helpers ---

    def _life(self, ttl: float) -> float:
        return ttl - (ttl * self.rho + self.eps)

    def _check_ttl(self, ttl: float) -> None:
        if not isinstance(ttl, (int, float)) or isinstance(ttl, bool):
            raise errors.InvalidError("ttl", f"must be a number of seconds, not {type(ttl).__name__}")
        if not math.isfinite(ttl):
            raise errors.InvalidError("ttl", f"{ttl} is not a number of seconds")
        if self._life(ttl) <= 0:
            raise errors.InvalidError("ttl", f"{ttl}s leaves no time after the drift margin (rho {self.rho}, eps {self.eps}s)")

    def _bounded(self, timeout: Optional[float]) -> float:
        """A request's timeout: the client's, or less when the caller has less time."""
        return self.timeout if timeout is None else max(min(timeout, self.timeout), MIN_REQUEST)


class ClientBase(ClientConfig):
    """What both blocking clients, the server's (``Client``) and DynamoDB's (``DynamoDBClient``), share.
    A ``Lease`` renews and releases itself through ``_renew`` and ``_release``, which each client has."""

    def close(self) -> None:
        """Close the client's connections. Leases are not released (they expire after their TTL)."""

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _renew(self, name: str, owner: str, token: int, ttl: float, timeout: Optional[float], *,
               secret: str = "") -> None:
        raise NotImplementedError

    def _release(self, name: str, owner: str, token: int, *, secret: str = "",
                 timeout: Optional[float] = None) -> None:
        raise NotImplementedError


class ElectionBase:
    """What both elections, the server's (``Election``) and DynamoDB's (``DirectElection``), share:
    the client that campaigns (each election declares its type) and the election's name, its lease's."""

    def __init__(self, client: Any, name: str) -> None:
        self._c, self.name = client, name
