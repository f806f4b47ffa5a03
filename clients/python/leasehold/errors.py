"""Typed exceptions of the leasehold client.

They mirror the Go package's errors: ``HeldError`` is ``*leasehold.HeldError``,
``NotHeldError`` is ``ErrNotHeld``, ``LostError`` is ``ErrLost``, ``ConflictError`` is
``*leasehold.ConflictError``, ``InvalidError`` is ``*leasehold.InvalidError``, and
the server's other problem types (``unauthorized``, ``forbidden``,
``rate-limited``, ``unavailable``, ...) have a class each. Every exception of
this package derives from ``LeaseholdError``. Each name ends in ``Error``;
the names without it (``Held``, ``Lost``, ...) are kept as aliases of the
same classes.
"""

from __future__ import annotations

from typing import Optional


class LeaseholdError(Exception):
    """Base class of every error raised by this package."""


class HeldError(LeaseholdError):
    """Someone else holds the lease (or every permit of a semaphore).

    ``owner``, ``token`` and ``remaining`` (seconds, rounded down by the
    server) describe the current holder; ``acquired`` is its grant time as
    an RFC 3339 string (empty when unknown); ``permits`` is set for a
    semaphore. Nothing was changed.
    """

    def __init__(self, name: str, owner: str = "", token: int = 0, remaining: float = 0.0,
                 acquired: str = "", permits: Optional[int] = None, detail: str = "") -> None:
        self.name, self.owner, self.token = name, owner, token
        self.remaining, self.acquired, self.permits = remaining, acquired, permits
        super().__init__(detail or f"lease {name!r} is held by {owner!r} (token {token}, expires in {remaining:.3f}s)")


class NotHeldError(LeaseholdError):
    """A renew or release named a grant (owner and token) that is not the live one. Nothing was changed."""


class BadProofError(NotHeldError):
    """403 ``bad-proof``: a renew or release without the grant's secret (the
    holder proof the server returns only to the acquirer, kept by ``Lease``),
    or with a wrong one: this client did not acquire the grant, or the
    server's holder key changed since. It is a ``NotHeldError``: only the
    acquirer can renew or release a grant. Nothing was changed."""


class NotFoundError(LeaseholdError):
    """No live lease, leader or record of that name."""


class LostError(LeaseholdError):
    """The lease is no longer known to be held: a renewal was refused, or its
    local deadline passed without a confirmed renewal. Stop the work it protects."""


class ReleasedError(LeaseholdError):
    """The lease was released by its holder (the reason a released lease is no longer held)."""


class ConflictError(LeaseholdError):
    """A record write's version condition did not hold (HTTP 412 or 409 ``conflict``).

    ``key`` is the (first) key whose condition failed; ``expected_version``
    what the write required (0: absent) and ``current_version`` what the
    server has (0: absent). Nothing was changed: read again and retry.
    """

    def __init__(self, key: str, expected_version: int, current_version: int, detail: str = "") -> None:
        self.key, self.expected_version, self.current_version = key, expected_version, current_version
        super().__init__(detail or f"record {key!r}: expected version {expected_version}, found {current_version}")


class InvalidError(LeaseholdError, ValueError):
    """Bad input (a name, owner, TTL, token, data, key, ...). ``field`` names it,
    ``reason`` says why. Nothing was changed."""

    def __init__(self, field: str, reason: str) -> None:
        self.field, self.reason = field, reason
        super().__init__(f"invalid {field}: {reason}")


class MismatchError(InvalidError):
    """A semaphore asked for with another permit count than a live permit
    recorded (``leasehold-permits=N``), or a name used both as a lock (a plain
    lease) and as a semaphore. Nothing is held when it is raised: the grant
    taken before the check was released. It is an ``InvalidError`` (as Go's
    ``*MismatchError`` matches ``ErrInvalid``): waiting or retrying does not help."""

    def __init__(self, name: str, reason: str) -> None:
        self.field, self.name, self.reason = "permits", name, reason
        LeaseholdError.__init__(self, f"{name}: {reason}")


class ProblemError(LeaseholdError):
    """A problem document of a type without a more specific class.

    ``status`` is the HTTP status, ``type`` the problem type after
    ``urn:leasehold:problem:``, ``retry_after`` the ``Retry-After`` header
    in seconds (None without one).
    """

    def __init__(self, status: int, type: str, title: str = "", detail: str = "",
                 retry_after: Optional[float] = None) -> None:
        self.status, self.type, self.title, self.detail = status, type, title, detail
        self.retry_after = retry_after
        super().__init__(f"leasehold server: {status} {type}: {detail or title}")


class UnauthorizedError(ProblemError):
    """401: a missing or unknown bearer token. Nothing was changed."""


class ForbiddenError(ProblemError):
    """403: the token's grants do not allow this on that name. Nothing was changed."""


class RateLimitedError(ProblemError):
    """429: over the identity's rate limit; ``retry_after`` says when to ask again. Nothing was changed."""


class QuotaExceededError(ProblemError):
    """429 ``quota-exceeded``: this client (its identity; with auth off, its IP
    address) is at one of the server's quotas: leases held, their data,
    sessions or waiting acquires. Nothing was changed; asking again helps only
    once the client holds less, so it is raised at once, not retried."""


class UnavailableError(ProblemError):
    """503: the server is shutting down or not ready; retry (an acquire with the same request id)."""


class NoSessionError(ProblemError):
    """404 ``no-session``: unknown, closed or expired session."""


class UnreachableError(LeaseholdError, ConnectionError):
    """The server could not be reached, or its answer was lost or malformed:
    the outcome of the request is unknown. An acquire retried with the same
    request id gets its grant back if there was one.

    ``request_id`` is the request id of the acquire (``try_acquire``,
    ``acquire``, a semaphore's, ``campaign``) that raised it, also when the
    call made the id up itself; None for other calls. Pass it as
    ``request_id=`` to retry: a grant made for the lost attempt comes back
    (same token), and no second one is made.
    """

    request_id: Optional[str] = None


_PROBLEM_CLASSES = {
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "rate-limited": RateLimitedError,
    "quota-exceeded": QuotaExceededError,
    "unavailable": UnavailableError,
    "no-session": NoSessionError,
}


class UnsupportedError(LeaseholdError, NotImplementedError):
    """The store behind this client does not offer the operation (for example
    force release or records directly on DynamoDB); nothing was sent."""


# The names before issue 29 (each class's name now ends in Error, as PEP 8
# asks): the very same classes, so ``except Held`` still catches a HeldError.
Held = HeldError
NotHeld = NotHeldError
BadProof = BadProofError
NotFound = NotFoundError
Lost = LostError
Released = ReleasedError
Conflict = ConflictError
Invalid = InvalidError
Unauthorized = UnauthorizedError
Forbidden = ForbiddenError
RateLimited = RateLimitedError
QuotaExceeded = QuotaExceededError
Unavailable = UnavailableError
NoSession = NoSessionError
Unreachable = UnreachableError
Unsupported = UnsupportedError

ALIASES = {"Held": HeldError, "NotHeld": NotHeldError, "BadProof": BadProofError, "NotFound": NotFoundError,
           "Lost": LostError, "Released": ReleasedError, "Conflict": ConflictError, "Invalid": InvalidError,
           "Unauthorized": UnauthorizedError, "Forbidden": ForbiddenError, "RateLimited": RateLimitedError,
           "QuotaExceeded": QuotaExceededError, "Unavailable": UnavailableError, "NoSession": NoSessionError,
           "Unreachable": UnreachableError, "Unsupported": UnsupportedError}
"""Old name -> class, for the package's ``__init__`` and the tests."""
