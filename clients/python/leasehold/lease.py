"""A held lease and its keepalive thread."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from . import errors

if TYPE_CHECKING:  # pragma: no cover
    from ._core import ClientBase


@dataclass
class LeaseInfo:
    """A lease as the server reports it (``get``, ``list``, ``leader``,
    ``force_release``). Durations are seconds; ``acquired`` is RFC 3339."""

    name: str
    owner: str
    token: int
    ttl: float
    remaining: float
    acquired: str = ""
    data: Optional[bytes] = None
    session: str = ""
    permit: Optional[int] = None
    term: Optional[int] = None
    waiters: List[Dict[str, Any]] = field(default_factory=list)
    secret: str = field(default="", repr=False)
    """The grant's holder proof, in acquire answers only (never shown by repr):
    renew and release send it. Treat it as a credential."""

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "LeaseInfo":
        data: Optional[bytes] = None
        if j.get("data") is not None:
            data = j["data"].encode("utf-8")
        elif j.get("data_base64") is not None:
            import base64
            data = base64.b64decode(j["data_base64"])
        return cls(name=j["name"], owner=j["owner"], token=int(j["token"]),
                   ttl=int(j.get("ttl_ms", 0)) / 1000.0, remaining=int(j.get("remaining_ms", 0)) / 1000.0,
                   acquired=j.get("acquired", ""), data=data, session=j.get("session", ""),
                   permit=j.get("permit"), term=j.get("term"), waiters=j.get("waiters") or [],
                   secret=j.get("secret") or "")


LostCallback = Callable[["Lease", errors.LeaseholdError], None]

RELEASE_JOIN = 0.1
"""Seconds ``release`` waits for a renewal in flight to end before it sends
the release anyway (a renewal that lands after it is refused: harmless)."""


class Lease:
    """A granted lease, kept alive by a background thread until released or lost.

    The holder's local deadline (``deadline``, on ``time.monotonic()``) is
    ``t0 + ttl·(1−ρ) − ε``, where ``t0`` was read *before* the request that
    was granted or last confirmed a renewal. The keepalive thread renews at
    about ``ttl/3``, each renewal bounded by the time left before the
    deadline. When a renewal is refused (the server no longer has the
    grant) or the deadline passes without a confirmed renewal, the lease is
    lost: ``lost`` is set, ``error`` becomes a ``Lost`` and ``on_lost`` is
    called once (from the thread that noticed; it must not block long).
    The deadline is watched by a timer thread of its own, so the loss is
    reported at the deadline whatever the network does (a renewal stuck
    in a hung connection does not delay it). An unknown outcome counts as
    lost, never as held.

    A ``Lease`` is one grant. Once released or lost it is never held again:
    entering it in a ``with`` block again raises its ``Released`` or
    ``Lost`` (the block does not run). Take a new lease for each block:
    ``with client.lease(name, ...) as lease:`` inside the loop.

    A lease does not fence writes by itself: pass ``token`` to the resource
    you write, and have it refuse tokens lower than the highest it has seen.

    Used as a context manager it releases on exit; if it was lost inside
    the block and the block raised nothing, ``__exit__`` raises the ``Lost``.
    """

    def __init__(self, client: "ClientBase", info: LeaseInfo, owner: str, ttl: float, request_id: str,
                 t0: float, keepalive: bool = True, on_lost: Optional[LostCallback] = None) -> None:
        self._c = client
        self.name: str = info.name
        self.owner: str = owner
        self.token: int = info.token
        self.request_id: str = request_id
        self.permit: Optional[int] = info.permit
        self.info: LeaseInfo = info
        self.ttl: float = ttl
        self.lost = threading.Event()
        """Set when the lease is lost (not when it is released)."""
        self.done = threading.Event()
        """Set when the lease is lost or released."""
        self._on_lost = on_lost
        self._mu = threading.Lock()
        self._rel_mu = threading.Lock()
        self._err: Optional[errors.LeaseholdError] = None
        self._released = False
        self._deadline = t0 + client._life(ttl)
        self._stop = threading.Event()
        """Set on release or loss: the keepalive and the timer end."""
        self._thread: Optional[threading.Thread] = None
        if keepalive:
            self._thread = threading.Thread(target=self._run, args=(t0 + ttl / 3,),
                                            name=f"leasehold-keepalive-{self.name}", daemon=True)
        self._timer = threading.Thread(target=self._watch, name=f"leasehold-deadline-{self.name}", daemon=True)
        self._timer.start()
        if self._thread is not None:
            self._thread.start()

    # --- state ---

    @property
    def deadline(self) -> float:
        """The local deadline on ``time.monotonic()``: held until then unless lost earlier."""
        with self._mu:
            return self._deadline

    @property
    def held(self) -> bool:
        """Whether the lease is known to be held right now. It checks the
        deadline now (not only the keepalive's view); once False, never True again."""
        with self._mu:
            if self._err is not None:
                return False
            if time.monotonic() >= self._deadline:
                err = errors.Lost(f"{self.name!r} (token {self.token}): local deadline passed without a confirmed renewal")
            else:
                return True
        self._finish(err)
        return False

    @property
    def error(self) -> Optional[errors.LeaseholdError]:
        """None while held; a ``Lost`` or ``Released`` once ``done`` is set."""
        with self._mu:
            return self._err

    def check(self) -> None:
        """Raise the ``Lost`` (or ``Released``) if the lease is no longer held."""
        if not self.held:
            raise self.error  # type: ignore[misc]

    def _finish(self, err: errors.LeaseholdError) -> None:
        with self._mu:
            if self._err is not None:
                return
            self._err = err
        self._stop.set()
        if isinstance(err, errors.Lost):
            self.lost.set()
        self.done.set()
        if isinstance(err, errors.Lost) and self._on_lost is not None:
            try:
                self._on_lost(self, err)
            except Exception:  # a callback's failure must not stop the loss from being seen
                pass

    # --- renew and release ---

    def renew(self) -> None:
        """Renew now for ``ttl``, from the moment before the request. Raises
        ``Lost`` if the server refused (the lease is then lost) or the
        confirmation came after the deadline; ``Unreachable`` and other
        errors leave the lease as it was (it is lost at its deadline)."""
        err = self.error
        if err is not None:
            raise err
        self._renew_once(None)

    def _renew_once(self, timeout: Optional[float]) -> None:
        t0 = time.monotonic()
        try:
            self._c._renew(self.name, self.owner, self.token, self.ttl, timeout, secret=self.info.secret)
        except errors.NotHeld:
            lerr = errors.Lost(f"renew {self.name!r} (token {self.token}) refused: the server no longer has it for this owner")
            self._finish(lerr)
            raise lerr from None
        with self._mu:
            late = self._err is None and time.monotonic() >= self._deadline
            if self._err is None and not late:
                self._deadline = t0 + self._c._life(self.ttl)
                return
        if late:
            lerr = errors.Lost(f"renew {self.name!r} (token {self.token}) confirmed after the local deadline")
            self._finish(lerr)
            raise lerr
        raise self.error  # type: ignore[misc]

    def release(self) -> None:
        """Stop the keepalive and release the lease, checked by owner and token.

        ``done`` is set at once. Releasing again returns None. If the server
        says the grant was no longer ours (it expired and was taken, or was
        force-released), raises ``Lost``; nothing else changes. If the
        server cannot be reached the error is raised and ``release`` may be
        called again; otherwise the lease expires after its TTL. It waits
        at most 0.1 s for a renewal in flight (one stuck in a hung
        connection is left behind); the release request itself is bounded
        by the client's ``timeout``.
        """
        with self._rel_mu:
            if self._released:
                return
            self._stop.set()
            t = self._thread
            if t is not None and threading.current_thread() is not t:
                t.join(RELEASE_JOIN)
            self._finish(errors.Released(f"{self.name!r} (token {self.token}) was released"))
            try:
                self._c._release(self.name, self.owner, self.token, secret=self.info.secret)
            except errors.NotHeld:
                self._released = True
                raise errors.Lost(f"release {self.name!r} (token {self.token}): the server no longer had it for this owner") from None
            self._released = True

    def __enter__(self) -> "Lease":
        if not self.held:
            err = self.error
            what = "was released" if isinstance(err, errors.Released) else "was lost"
            msg = (f"{self.name!r} (token {self.token}) {what} ({err}): a Lease is one grant and is not taken "
                   f"again by a with block; take a new one for each block: with client.lease({self.name!r}, ...) as lease:")
            raise errors.Released(msg) if isinstance(err, errors.Released) else errors.Lost(msg)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        was_lost = self.lost.is_set() or not self.held
        lost_err = self.error
        if exc_type is not None:
            try:
                self.release()
            except errors.LeaseholdError:
                pass  # do not mask the block's own exception
            return False
        try:
            self.release()
        except errors.Lost:
            if not was_lost:
                raise
        if was_lost and isinstance(lost_err, errors.Lost):
            raise lost_err
        return False

    # --- keepalive and deadline threads ---

    def _watch(self) -> None:
        """The deadline timer: the lease is lost when its deadline passes,
        whatever the keepalive thread is doing (a renewal may hang)."""
        while self.held:  # False once finished, or (finishing it as lost) once the deadline has passed
            if self._stop.wait(max(self.deadline - time.monotonic(), 0.0)):
                return  # released or lost; release() sets it just before it finishes the lease

    def _run(self, renew_at: float) -> None:
        fails = 0
        while not self._stop.is_set():
            now = time.monotonic()
            deadline = self.deadline
            if self.error is not None or now >= deadline:
                return  # the timer reports the loss
            if now < renew_at:
                if self._stop.wait(max(min(deadline, renew_at) - now, 0.0)):
                    return
                continue
            try:
                # An answer that cannot arrive before the deadline is of no use.
                self._renew_once(max(deadline - now, 0.05))
                fails = 0
                renew_at = self.deadline - self._c._life(self.ttl) + self.ttl / 3
            except errors.Lost:
                return
            except Exception:  # unknown outcome (or an unexpected failure): try again before the deadline
                fails += 1
                lo, hi = max(self.ttl / 50, 0.001), max(self.ttl / 10, 0.001)
                renew_at = time.monotonic() + min(hi, lo * (2 ** min(fails, 10))) * (0.5 + random.random() / 2)
