"""Input checks with the Go package's rules (validate.go), for what the client checks itself."""

from __future__ import annotations

import math
import unicodedata
from typing import Union

from . import errors

MAX_NAME = 256
MAX_OWNER = 256
MAX_REQUEST_ID = 128
MAX_DATA = 64 << 10
MIN_TTL = 0.010
MAX_TTL = 24 * 3600.0


def text(field: str, s: str, limit: int) -> None:
    """1..limit bytes of UTF-8 without control characters (Unicode category Cc)."""
    if not isinstance(s, str):
        raise errors.InvalidError(field, f"must be a str, not {type(s).__name__}")
    if s == "":
        raise errors.InvalidError(field, "must not be empty")
    try:
        n = len(s.encode("utf-8"))
    except UnicodeEncodeError:
        raise errors.InvalidError(field, f"{s!r} is not valid UTF-8") from None
    if n > limit:
        raise errors.InvalidError(field, f"{n} bytes is longer than the limit of {limit}")
    for i, ch in enumerate(s):
        if unicodedata.category(ch) == "Cc":
            raise errors.InvalidError(field, f"control character U+{ord(ch):04X} at index {i}")


def ttl(seconds: Union[int, float]) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise errors.InvalidError("ttl", f"must be a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds):  # as the server's client says it (_core.ClientConfig._check_ttl)
        raise errors.InvalidError("ttl", f"{seconds} is not a number of seconds")
    if not MIN_TTL <= seconds <= MAX_TTL:
        raise errors.InvalidError("ttl", f"{seconds}s is outside the allowed range [10ms, 24h]")


def token(t: int) -> None:
    if isinstance(t, bool) or not isinstance(t, int) or t < 1 or t >= 2 ** 64:
        raise errors.InvalidError("token", f"{t!r} is not a token (tokens start at 1)")
