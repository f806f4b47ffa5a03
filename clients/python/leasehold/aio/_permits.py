"""The checks of ``leasehold._permits`` after a grant, for asyncio."""

from __future__ import annotations

from typing import Awaitable, Callable, List, Optional

from .. import errors
from .._log import log
from .._bound import within
from .._core import _with_request_id
from .._permits import SEP, hide, lock_conflict, semaphore_conflict
from ..lease import LeaseInfo
from .lease import Lease


async def _give_back(lease: Lease) -> None:
    try:
        await lease.release()
    except errors.LeaseholdError as e:  # it expires after its TTL
        log.warning("release of %r (token %d) after a failed name check failed: %s", lease.name, lease.token, e)


async def verify_permit(lease: Lease, name: str, n: int, get: Callable[[str], Awaitable[LeaseInfo]],
                        list_: Callable[[str], Awaitable[List[LeaseInfo]]], *, hard: Optional[float]) -> Lease:
    """``leasehold._permits.verify_permit`` with ``await``."""
    try:
        with within(hard):
            return await _verify_permit(lease, name, n, get, list_)
    except errors.UnreachableError as e:  # the grant was made: a retry with its request id gets it back
        raise _with_request_id(e, lease.request_id)


async def _verify_permit(lease: Lease, name: str, n: int, get: Callable[[str], Awaitable[LeaseInfo]],
                         list_: Callable[[str], Awaitable[List[LeaseInfo]]]) -> Lease:
    try:
        try:
            plain: Optional[LeaseInfo] = await get(name)
        except errors.NotFoundError:
            plain = None
        err = semaphore_conflict(name, n, plain, await list_(name + SEP) if plain is None else ())
    except BaseException:
        await _give_back(lease)
        raise
    if err is not None:
        await _give_back(lease)
        raise err
    hide(lease.info)
    return lease


async def verify_lock(lease: Lease, name: str, list_: Callable[[str], Awaitable[List[LeaseInfo]]], *,
                      hard: Optional[float]) -> Lease:
    """``leasehold._permits.verify_lock`` with ``await``."""
    try:
        with within(hard):
            return await _verify_lock(lease, name, list_)
    except errors.UnreachableError as e:  # the grant was made: a retry with its request id gets it back
        raise _with_request_id(e, lease.request_id)


async def _verify_lock(lease: Lease, name: str, list_: Callable[[str], Awaitable[List[LeaseInfo]]]) -> Lease:
    try:
        err = lock_conflict(name, await list_(name + SEP))
    except BaseException:
        await _give_back(lease)
        raise
    if err is not None:
        await _give_back(lease)
        raise err
    return lease
