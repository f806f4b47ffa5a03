"""A held lease and its keepalive thread."""

from __future__ import annotations

import random
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from . import errors
from ._log import log

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


def note_loss(exc: Any, name: str, token: int, lost_at: Optional[float], err: Optional[errors.LeaseholdError]) -> None:
    """Tell an exception raised inside a ``with`` block that the lease was lost
    meanwhile (``BaseException.add_note``, Python 3.11 and later; earlier, nothing)."""
    add_note = getattr(exc, "add_note", None)
    if add_note is None or not isinstance(err, errors.LostError):
        return
    when = "at an unknown time" if lost_at is None else "at " + time.strftime(
        "%Y-%m-%dT%H:%M:%S", time.gmtime(lost_at)) + f".{int(lost_at * 1000) % 1000:03d}Z"
    add_note(f"leasehold: the lease {name!r} (token {token}) was lost {when}, while this block ran: "
             f"its exclusion was broken from then on ({err})")


class Lease:
    """A granted lease, kept alive by a background thread until released or lost.

    The holder's local deadline (``deadline``, on ``time.monotonic()``) is
    ``t0 + ttl·(1−ρ) − ε``, where ``t0`` was read *before* the request that
    was granted or last confirmed a renewal. The keepalive thread renews at
    about ``ttl/3``, each renewal bounded by the time left before the
    deadline. When a renewal is refused (the server no longer has the
    grant) or the deadline passes without a confirmed renewal, the lease is
    lost: ``lost`` is set, ``error`` becomes a ``LostError`` and ``on_lost`` is
    called once (from the thread that noticed; it must not block long).
    The deadline is watched by a timer thread of its own, so the loss is
    reported at the deadline whatever the network does (a renewal stuck
    in a hung connection does not delay it). An unknown outcome counts as
    lost, never as held.

    A ``Lease`` is one grant. Once released or lost it is never held again:
    entering it in a ``with`` block again raises its ``ReleasedError`` or
    ``LostError`` (the block does not run). Take a new lease for each block:
    ``with client.lease(name, ...) as lease:`` inside the loop.

    A lease does not fence writes by itself: pass ``token`` to the resource
    you write, and have it refuse tokens lower than the highest it has seen.

    Used as a context manager it releases on exit; if it was lost inside
    the block and the block raised nothing, ``__exit__`` raises the ``LostError``.

    Keep the Lease while you rely on it: its threads hold it by a weak
    reference, so a Lease nobody keeps is collected, stops renewing (a
    WARNING is logged) and expires after its TTL.
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
        self.lost_at: Optional[float] = None
        """When the loss was seen (``time.time()``); None while not lost."""
        self._released = False
        self._deadline = t0 + client._life(ttl)
        self._stop = threading.Event()
        """Set on release or loss: the keepalive and the timer end."""
        # The threads hold the Lease by a weak reference between their turns:
        # a Lease nobody keeps is collected, which ends them (see _abandoned).
        ref = weakref.ref(self)
        self._thread: Optional[threading.Thread] = None
        if keepalive:
            self._thread = threading.Thread(target=_keepalive, args=(ref, self._stop, t0 + ttl / 3),
                                            name=f"leasehold-keepalive-{self.name}", daemon=True)
        log.debug("lease %r granted (token %d, ttl %ss, keepalive %s)", self.name, self.token, ttl, keepalive)
        self._timer = threading.Thread(target=_watch, args=(ref, self._stop), name=f"leasehold-deadline-{self.name}",
                                       daemon=True)
        self._finalizer = weakref.finalize(self, _abandoned, self._stop, self.done, self.name, self.token)
        self._timer.start()
        if self._thread is not None:
            self._thread.start()

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self.lost.is_set() else "released")
        permit = "" if self.permit is None else f" permit={self.permit}"
        return f"<leasehold.Lease {self.name!r} token={self.token}{permit} owner={self.owner!r} ttl={self.ttl} {state}>"

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
                err = errors.LostError(f"{self.name!r} (token {self.token}): local deadline passed without a confirmed renewal")
            else:
                return True
        self._finish(err)
        return False

    @property
    def error(self) -> Optional[errors.LeaseholdError]:
        """None while held; a ``LostError`` or ``ReleasedError`` once ``done`` is set."""
        with self._mu:
            return self._err

    def check(self) -> None:
        """Raise the ``LostError`` (or ``ReleasedError``) if the lease is no longer held."""
        if not self.held:
            raise self.error  # type: ignore[misc]

    def _finish(self, err: errors.LeaseholdError) -> None:
        with self._mu:
            if self._err is not None:
                return
            self._err = err
            if isinstance(err, errors.LostError):
                self.lost_at = time.time()
        self._stop.set()
        if isinstance(err, errors.LostError):
            log.error("lease %r (token %d) lost: %s", self.name, self.token, err)
            self.lost.set()
        else:
            log.debug("lease %r (token %d): released", self.name, self.token)
        self.done.set()
        if isinstance(err, errors.LostError) and self._on_lost is not None:
            try:
                self._on_lost(self, err)
            except Exception:  # a callback's failure must not stop the loss from being seen
                log.exception("on_lost callback of lease %r (token %d) raised (swallowed: the loss stands)",
                              self.name, self.token)

    def _hand_over(self) -> None:
        """End this Lease's threads without releasing the grant: the asyncio client
        (``leasehold.aio``) keeps it in a Lease of its own from now on."""
        self._finalizer.detach()
        self._stop.set()

    # --- renew and release ---

    def renew(self, ttl: Optional[float] = None) -> None:
        """Renew now for ``ttl`` (default: the lease's; given, it becomes the
        lease's TTL for the renewals that follow), from the moment before the
        request. Raises ``LostError`` if the server refused (the lease is then
        lost) or the confirmation came after the deadline; ``UnreachableError``
        and other errors leave the lease as it was (it is lost at its deadline)."""
        err = self.error
        if err is not None:
            raise err
        if ttl is not None:
            self._c._check_ttl(ttl)
        self._renew_once(None, ttl)

    def _renew_once(self, timeout: Optional[float], ttl: Optional[float] = None) -> None:
        t0 = time.monotonic()
        ttl = self.ttl if ttl is None else ttl
        try:
            self._c._renew(self.name, self.owner, self.token, ttl, timeout, secret=self.info.secret)
        except errors.NotHeldError:
            lerr = errors.LostError(f"renew {self.name!r} (token {self.token}) refused: the server no longer has it for this owner")
            self._finish(lerr)
            raise lerr from None
        with self._mu:
            late = self._err is None and time.monotonic() >= self._deadline
            if self._err is None and not late:
                self.ttl = ttl
                self._deadline = t0 + self._c._life(ttl)
                log.debug("lease %r (token %d) renewed for %ss", self.name, self.token, ttl)
                return
        if late:
            lerr = errors.LostError(f"renew {self.name!r} (token {self.token}) confirmed after the local deadline")
            self._finish(lerr)
            raise lerr
        raise self.error  # type: ignore[misc]

    def release(self) -> None:
        """Stop the keepalive and release the lease, checked by owner and token.

        ``done`` is set at once. Releasing again returns None. If the server
        says the grant was no longer ours (it expired and was taken, or was
        force-released), raises ``LostError``; nothing else changes. If the
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
            self._finish(errors.ReleasedError(f"{self.name!r} (token {self.token}) was released"))
            try:
                self._c._release(self.name, self.owner, self.token, secret=self.info.secret)
            except errors.NotHeldError:
                self._released = True
                raise errors.LostError(f"release {self.name!r} (token {self.token}): the server no longer had it for this owner") from None
            self._released = True

    def __enter__(self) -> "Lease":
        if not self.held:
            err = self.error
            what = "was released" if isinstance(err, errors.ReleasedError) else "was lost"
            msg = (f"{self.name!r} (token {self.token}) {what} ({err}): a Lease is one grant and is not taken "
                   f"again by a with block; take a new one for each block: with client.lease({self.name!r}, ...) as lease:")
            raise errors.ReleasedError(msg) if isinstance(err, errors.ReleasedError) else errors.LostError(msg)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        was_lost = self.lost.is_set() or not self.held
        lost_err = self.error
        if exc_type is not None:
            if was_lost:
                note_loss(exc, self.name, self.token, self.lost_at, lost_err)
            try:
                self.release()
            except errors.LeaseholdError as e:  # not raised: it would mask the block's own exception
                log.warning("release of lease %r (token %d) after its block raised %s failed: %s",
                            self.name, self.token, exc_type.__name__, e)
            return
        try:
            self.release()
        except errors.LostError:
            if not was_lost:
                raise
        except Exception:
            # The loss wins over a failed release (the server stopped, say):
            # raised here, the release's error is its __context__.
            if was_lost and isinstance(lost_err, errors.LostError):
                raise lost_err
            raise
        if was_lost and isinstance(lost_err, errors.LostError):
            raise lost_err

    # --- keepalive ---

    def _keepalive_step(self, renew_at: float, fails: int) -> Optional[Tuple[float, float, int]]:
        """One turn of the keepalive: (seconds to wait, renew_at, fails), or None when it ends."""
        now = time.monotonic()
        deadline = self.deadline
        if self.error is not None or now >= deadline:
            return None  # the timer reports the loss
        if now < renew_at:
            return min(deadline, renew_at) - now, renew_at, fails
        try:
            # An answer that cannot arrive before the deadline is of no use.
            self._renew_once(max(deadline - now, 0.05))
            return 0.0, self.deadline - self._c._life(self.ttl) + self.ttl / 3, 0
        except errors.LostError:
            return None
        except Exception as e:  # unknown outcome (or an unexpected failure): try again before the deadline
            fails += 1
            lo, hi = max(self.ttl / 50, 0.001), max(self.ttl / 10, 0.001)
            pause = min(hi, lo * (2 ** min(fails, 10))) * (0.5 + random.random() / 2)
            log.warning("renewal %d of lease %r (token %d) failed: %s; trying again in %.3fs, %.3fs before "
                        "its deadline", fails, self.name, self.token, e, pause,
                        max(deadline - time.monotonic(), 0.0), exc_info=not isinstance(e, errors.LeaseholdError))
            return 0.0, time.monotonic() + pause, fails


def _watch(ref: "weakref.ReferenceType[Lease]", stop: threading.Event) -> None:
    """The deadline timer: the lease is lost when its deadline passes, whatever
    the keepalive thread is doing (a renewal may hang)."""
    while True:
        lease = ref()
        if lease is None or not lease.held:  # held: False once finished, or (finishing it as lost) past the deadline
            return
        left = lease.deadline - time.monotonic()
        del lease
        if stop.wait(max(left, 0.0)):
            return  # released or lost; release() sets it just before it finishes the lease


def _keepalive(ref: "weakref.ReferenceType[Lease]", stop: threading.Event, renew_at: float) -> None:
    fails = 0
    while not stop.is_set():
        lease = ref()
        if lease is None:
            return
        turn = lease._keepalive_step(renew_at, fails)
        del lease
        if turn is None:
            return
        pause, renew_at, fails = turn
        if pause > 0 and stop.wait(pause):
            return


def _abandoned(stop: threading.Event, done: threading.Event, name: str, token: int) -> None:
    """A Lease was garbage-collected: its threads end (nobody could use its token)."""
    stop.set()
    if not done.is_set():
        log.warning("lease %r (token %d) was garbage-collected while held: nobody renews it now, "
                    "it expires after its TTL", name, token)
