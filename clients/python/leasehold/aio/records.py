"""Versioned records for the asyncio client: ``leasehold.Records`` with ``await``."""

from __future__ import annotations

import asyncio
import base64
import random
from typing import Awaitable, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

from .. import errors
from .._http import name_path
from ..records import Record, RetriesExhaustedError, Value, Write, _bytes, _version
from ._http import AsyncTransport


class Records:
    """As ``leasehold.Records``; reach it as ``client.records``."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def get(self, key: str) -> Record:
        """The record at ``key``; raises ``NotFoundError`` when there is none."""
        _, _, j = await self._t.request("GET", name_path("v1/records", key), name=key)
        if j.get("value") is not None:
            value = j["value"].encode("utf-8")
        else:
            value = base64.b64decode(j.get("value_base64", ""))
        return Record(j["key"], value, int(j["version"]))

    async def put(self, key: str, value: Value, version: int) -> int:
        """Write ``value`` if the record is at ``version`` (0: only if absent); returns the new version."""
        raw = _bytes(value)
        v = _version(version)
        hdr = {"If-None-Match": "*"} if v == 0 else {"If-Match": f'"{v}"'}
        _, _, j = await self._t.request("PUT", name_path("v1/records", key), raw=raw, headers=hdr, name=key)
        return int(j["version"])

    async def delete(self, key: str, version: int) -> None:
        """Delete ``key`` if it is at ``version`` (>= 1)."""
        v = _version(version)
        if v == 0:
            raise errors.InvalidError("version", "a delete names the version it removes (>= 1)")
        await self._t.request("DELETE", name_path("v1/records", key), headers={"If-Match": f'"{v}"'}, name=key)

    async def add(self, key: str, delta: int) -> Tuple[int, int]:
        """Atomically add ``delta`` to the counter at ``key``; returns (value, version)."""
        if isinstance(delta, bool) or not isinstance(delta, int) or not -(2 ** 63) <= delta < 2 ** 63:
            raise errors.InvalidError("delta", f"{delta!r} is not an int64")
        _, _, j = await self._t.request("POST", name_path("v1/records", key, "add"), {"delta": delta}, name=key)
        return int(j["value"]), int(j["version"])

    async def txn(self, conditions: Mapping[str, int], writes: Sequence[Write]) -> Dict[str, int]:
        """All or nothing, as ``leasehold.Records.txn``."""
        body = {"if": [{"key": k, "version": _version(v)} for k, v in conditions.items()],
                "then": [w.to_json() for w in writes]}
        _, _, j = await self._t.request("POST", "/v1/txn", body)
        return {k: int(v) for k, v in j["versions"].items()}

    async def update(self, key: str, fn: Callable[[Optional[bytes]], Union[Value, Awaitable[Value]]],
                     attempts: int = 10, backoff_min: float = 0.002, backoff_max: float = 0.2) -> Record:
        """Read, compute ``fn(old)`` (a function or a coroutine function, free of side
        effects), write at the version read; again on a conflict, as ``leasehold.Records.update``."""
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise errors.InvalidError("attempts", f"{attempts!r} is not a positive integer")
        last: Optional[errors.ConflictError] = None
        for attempt in range(1, attempts + 1):
            try:
                cur: Optional[Record] = await self.get(key)
            except errors.NotFoundError:
                cur = None
            out = fn(cur.value if cur else None)
            value = await out if asyncio.iscoroutine(out) or isinstance(out, asyncio.Future) else out
            new = _bytes(value)
            try:
                v = await self.put(key, new, cur.version if cur else 0)
                return Record(key, new, v)
            except errors.ConflictError as e:
                last = e
            if attempt < attempts:
                cap = min(backoff_max, backoff_min * 2 ** (attempt - 1))
                await asyncio.sleep(random.uniform(cap / 2, cap))
        assert last is not None
        raise RetriesExhaustedError(last, attempts)
