"""Versioned records over the server's HTTP API (``/v1/records``, ``/v1/txn``)."""

from __future__ import annotations

import base64
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

from . import errors
from ._http import name_path

if TYPE_CHECKING:  # pragma: no cover
    from ._http import Transport

Value = Union[bytes, str]


def _bytes(v: Value, field: str = "value") -> bytes:
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    raise errors.InvalidError(field, f"must be bytes or str, not {type(v).__name__}")


def _version(v: int, field: str = "version") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise errors.InvalidError(field, f"{v!r} is not a version (an integer >= 0)")
    return v


@dataclass(frozen=True)
class Record:
    """A record's value and version (versions start at 1; 0 means absent)."""

    key: str
    value: bytes
    version: int


@dataclass(frozen=True)
class Write:
    """One write of a transaction (``Records.txn``); make it with ``Write.put(key, value)``,
    ``Write.remove(key)`` or ``Write.add_to(key, delta)``. (The fields ``delete`` and
    ``add`` are what a write does, not its factories.)"""

    key: str
    value: Optional[bytes] = None
    delete: bool = False
    add: Optional[int] = None

    @staticmethod
    def put(key: str, value: Value) -> "Write":
        return Write(key, value=_bytes(value))

    @staticmethod
    def remove(key: str) -> "Write":
        return Write(key, delete=True)

    @staticmethod
    def add_to(key: str, delta: int) -> "Write":
        return Write(key, add=delta)

    def to_json(self) -> Dict[str, object]:
        j: Dict[str, object] = {"key": self.key}
        if self.delete:
            j["delete"] = True
        elif self.add is not None:
            j["add"] = self.add
        elif self.value is not None:
            try:
                j["value"] = self.value.decode("utf-8")
            except UnicodeDecodeError:
                j["value_base64"] = base64.b64encode(self.value).decode("ascii")
        return j


class RetriesExhaustedError(errors.ConflictError):
    """``update`` still met conflicting writers after ``attempts`` tries; nothing of its own was written."""

    def __init__(self, last: errors.ConflictError, attempts: int) -> None:
        self.attempts, self.last = attempts, last
        super().__init__(last.key, last.expected_version, last.current_version,
                         f"record {last.key!r}: still conflicting after {attempts} attempts (last: {last})")


RetriesExhausted = RetriesExhaustedError
"""The name before issue 29: the same class."""


class Records:
    """Compare-and-set records: every write names the version it replaces,
    so a writer that read an old version gets ``ConflictError`` instead of undoing
    another's write. Reach it as ``client.records``."""

    def __init__(self, transport: "Transport") -> None:
        self._t = transport

    def get(self, key: str) -> Record:
        """The record at ``key``; raises ``NotFoundError`` when there is none."""
        _, _, j = self._t.request("GET", name_path("v1/records", key), name=key)
        if j.get("value") is not None:
            value = j["value"].encode("utf-8")
        else:
            value = base64.b64decode(j.get("value_base64", ""))
        return Record(j["key"], value, int(j["version"]))

    def put(self, key: str, value: Value, version: int) -> int:
        """Write ``value`` if the record is at ``version`` (0: only if ``key`` is absent);
        returns the new version. Raises ``ConflictError`` (with the current version) otherwise."""
        raw = _bytes(value)
        v = _version(version)
        hdr = {"If-None-Match": "*"} if v == 0 else {"If-Match": f'"{v}"'}
        _, _, j = self._t.request("PUT", name_path("v1/records", key), raw=raw, headers=hdr, name=key)
        return int(j["version"])

    def delete(self, key: str, version: int) -> None:
        """Delete ``key`` if it is at ``version`` (>= 1). Raises ``ConflictError`` or ``NotFoundError``."""
        v = _version(version)
        if v == 0:
            raise errors.InvalidError("version", "a delete names the version it removes (>= 1)")
        self._t.request("DELETE", name_path("v1/records", key), headers={"If-Match": f'"{v}"'}, name=key)

    def add(self, key: str, delta: int) -> Tuple[int, int]:
        """Atomically add ``delta`` to the counter at ``key`` (created at 0); returns (value, version).
        Concurrent adds never lose each other. A non-counter or an overflow raises ``InvalidError``."""
        if isinstance(delta, bool) or not isinstance(delta, int) or not -(2 ** 63) <= delta < 2 ** 63:
            raise errors.InvalidError("delta", f"{delta!r} is not an int64")
        _, _, j = self._t.request("POST", name_path("v1/records", key, "add"), {"delta": delta}, name=key)
        return int(j["value"]), int(j["version"])

    def txn(self, conditions: Mapping[str, int], writes: Sequence[Write]) -> Dict[str, int]:
        """All or nothing: if every key in ``conditions`` is at its version (0: absent),
        apply every write. Returns the new version of each written key (0 for a
        delete). Raises ``ConflictError`` naming the first failed condition; nothing changes then."""
        body = {"if": [{"key": k, "version": _version(v)} for k, v in conditions.items()],
                "then": [w.to_json() for w in writes]}
        _, _, j = self._t.request("POST", "/v1/txn", body)
        return {k: int(v) for k, v in j["versions"].items()}

    def update(self, key: str, fn: Callable[[Optional[bytes]], Value], attempts: int = 10,
               backoff_min: float = 0.002, backoff_max: float = 0.2) -> Record:
        """Read ``key``, compute ``fn(old)`` (``old`` is None when absent) and write it
        at the version read; on a conflict, wait a jittered, growing pause and do
        it again, at most ``attempts`` times, then raise ``RetriesExhaustedError``.
        ``fn`` must be free of side effects: it may run several times. An
        exception from ``fn`` stops the update and is raised as it is."""
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise errors.InvalidError("attempts", f"{attempts!r} is not a positive integer")
        last: Optional[errors.ConflictError] = None
        for attempt in range(1, attempts + 1):
            try:
                cur: Optional[Record] = self.get(key)
            except errors.NotFoundError:
                cur = None
            new = _bytes(fn(cur.value if cur else None))
            try:
                v = self.put(key, new, cur.version if cur else 0)
                return Record(key, new, v)
            except errors.ConflictError as e:
                last = e
            if attempt < attempts:
                cap = min(backoff_max, backoff_min * 2 ** (attempt - 1))
                time.sleep(random.uniform(cap / 2, cap))
        assert last is not None
        raise RetriesExhaustedError(last, attempts)
