"""The permit count a semaphore records with each permit, shared with the Go
client and ``leasehold run --permits``: a permit's data begins with the line
``leasehold-permits=N``, then the caller's data. After each grant a semaphore
reads the name and its permits (a lock reads the permits) and gives its grant
back when another user of the name disagrees (``MismatchError``)."""

from __future__ import annotations

from typing import Callable, Iterable, List, Optional, Tuple

from . import errors
from ._bound import within
from ._core import Data, _with_request_id
from ._log import log
from .lease import Lease, LeaseInfo

PREFIX = b"leasehold-permits="
SEP = "/permit/"
MAX_PERMITS = 1024


def permit_data(n: int, data: Data) -> bytes:
    """The data a permit of a semaphore of ``n`` permits is acquired with."""
    if data is None:
        raw = b""
    elif isinstance(data, str):
        raw = data.encode("utf-8")
    elif isinstance(data, (bytes, bytearray)):
        raw = bytes(data)
    else:
        raise errors.InvalidError("data", f"must be bytes or str, not {type(data).__name__}")
    return PREFIX + str(n).encode("ascii") + b"\n" + raw


def permit_count(data: Optional[bytes]) -> Tuple[Optional[int], Optional[bytes]]:
    """The count recorded in a permit's data (None if none) and the caller's data after it."""
    if data is None or not data.startswith(PREFIX):
        return None, data
    num, nl, rest = data[len(PREFIX):].partition(b"\n")
    if not nl or not num.isdigit() or not num.isascii():
        return None, data
    n = int(num)
    if not 1 <= n <= MAX_PERMITS or str(n).encode("ascii") != num:
        return None, data
    return n, rest


def hide(info: LeaseInfo) -> None:
    """Leave the record of N out of a permit's data, as Go's Holders and Lease.Data do."""
    _, info.data = permit_count(info.data)


def is_permit(semaphore: str, lease_name: str) -> bool:
    if not lease_name.startswith(semaphore + SEP):
        return False
    rest = lease_name[len(semaphore) + len(SEP):]
    return rest.isdigit() and rest.isascii() and str(int(rest)) == rest


def semaphore_conflict(name: str, n: int, plain: Optional[LeaseInfo],
                       permits: Iterable[LeaseInfo]) -> Optional[errors.MismatchError]:
    """What disagrees with a semaphore ``name`` of ``n`` permits: ``plain`` (the
    lease ``name``, None when not held) or a live permit recording another N."""
    if plain is not None:
        return errors.MismatchError(name, f"held as a plain lease (a lock) by {plain.owner} (token {plain.token}), "
                                          "so it cannot be a semaphore too; use another name for one of them")
    for p in permits:
        if not is_permit(name, p.name):
            continue
        m, _ = permit_count(p.data)
        if m is not None and m != n:
            return errors.MismatchError(name, f"a semaphore of {m} permits (recorded by {p.owner}, holder of "
                                              f"{p.name}), not {n}; every user must give the same count (to "
                                              "change it, wait until no permit is held)")
    return None


def lock_conflict(name: str, permits: Iterable[LeaseInfo]) -> Optional[errors.MismatchError]:
    """A live permit of the semaphore ``name``, which a lock of that name conflicts with."""
    for p in permits:
        if is_permit(name, p.name):
            return errors.MismatchError(name, f"in use as a semaphore ({p.name} is held by {p.owner}), so it "
                                              "cannot be a lock too; use another name for one of them")
    return None


def _give_back(lease: Lease) -> None:
    try:
        lease.release()
    except errors.LeaseholdError as e:  # it expires after its TTL
        log.warning("release of %r (token %d) after a failed name check failed: %s", lease.name, lease.token, e)


def verify_permit(lease: Lease, name: str, n: int, get: Callable[[str], LeaseInfo],
                  list_: Callable[[str], List[LeaseInfo]], *, hard: Optional[float]) -> Lease:
    """After a permit's grant: keep it, its data without the record of N, or release it
    and raise ``MismatchError`` (or the error of reading). Its requests end by
    ``hard``, the bound of the acquire (None: each the client's timeout)."""
    try:
        with within(hard):
            return _verify_permit(lease, name, n, get, list_)
    except errors.UnreachableError as e:  # the grant was made: a retry with its request id gets it back
        raise _with_request_id(e, lease.request_id)


def _verify_permit(lease: Lease, name: str, n: int, get: Callable[[str], LeaseInfo],
                   list_: Callable[[str], List[LeaseInfo]]) -> Lease:
    try:
        try:
            plain: Optional[LeaseInfo] = get(name)
        except errors.NotFoundError:
            plain = None
        err = semaphore_conflict(name, n, plain, list_(name + SEP) if plain is None else ())
    except BaseException:
        _give_back(lease)
        raise
    if err is not None:
        _give_back(lease)
        raise err
    hide(lease.info)
    return lease


def verify_lock(lease: Lease, name: str, list_: Callable[[str], List[LeaseInfo]], *, hard: Optional[float]) -> Lease:
    """After a lock's grant: keep it, or release it and raise ``MismatchError`` when
    permits of a semaphore of the same name are held. Its requests end by ``hard``
    (as ``verify_permit``'s)."""
    try:
        with within(hard):
            return _verify_lock(lease, name, list_)
    except errors.UnreachableError as e:  # the grant was made: a retry with its request id gets it back
        raise _with_request_id(e, lease.request_id)


def _verify_lock(lease: Lease, name: str, list_: Callable[[str], List[LeaseInfo]]) -> Lease:
    try:
        err = lock_conflict(name, list_(name + SEP))
    except BaseException:
        _give_back(lease)
        raise
    if err is not None:
        _give_back(lease)
        raise err
    return lease
