"""Parsing of dynamodb:// URLs with the Go store's rules (dynamodb/url.go)."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Dict

from . import errors

DEFAULT_MAX_CLOCK_SKEW = 1.0
"""Seconds; the Go store's default (DefaultMaxClockSkew)."""

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(s: str) -> float:
    """A Go duration string ("1s", "500ms", "1m30s", "0") in seconds."""
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise errors.InvalidError("dynamodb URL", f"max_clock_skew={s!r} is not a duration (e.g. 1s, 500ms)")
    return total


def _bool(k: str, v: str) -> bool:
    if v in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if v in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise errors.InvalidError("dynamodb URL", f"{k}={v!r} is not true or false")


def parse_url(url: str) -> Dict[str, Any]:
    """Parse ``dynamodb://TABLE?region=&endpoint=&max_clock_skew=&consistent=&create=&ttl_cleanup=&condition_values=&one_write_region=``
    with the Go store's rules; a bad URL raises ``InvalidError`` before anything is sent."""
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port
    except ValueError as err:  # "dynamodb://[::1", "dynamodb://t:x": urllib's own ValueError
        raise errors.InvalidError("dynamodb URL", f"{url!r} is malformed ({err})") from None
    if u.scheme != "dynamodb":
        raise errors.InvalidError("dynamodb URL", "want dynamodb://TABLE[?region=...&endpoint=...]")
    if "@" in u.netloc or port is not None or u.path not in ("", "/") or u.fragment:
        raise errors.InvalidError("dynamodb URL", "want dynamodb://TABLE[?param=value&...], with no user, port, path or fragment")
    table = u.netloc
    if not re.fullmatch(r"[a-zA-Z0-9_.-]{3,255}", table):
        raise errors.InvalidError("table", f"{table!r} is not a DynamoDB table name (3-255 characters of a-z A-Z 0-9 _ - .)")
    p: Dict[str, Any] = {"table": table, "region": None, "endpoint": None, "skew": DEFAULT_MAX_CLOCK_SKEW,
                         "consistent": True, "create": True, "ttl_cleanup": False, "one_write_region": False}
    q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
    for k, vs in q.items():
        if len(vs) != 1:
            raise errors.InvalidError("dynamodb URL", f"{k}= given {len(vs)} times")
        v = vs[0]
        if k == "region":
            if not re.fullmatch(r"[a-z0-9-]{1,64}", v):
                raise errors.InvalidError("dynamodb URL", f"region={v!r} is not a region name")
            p["region"] = v
        elif k == "endpoint":
            try:
                e = urllib.parse.urlsplit(v)
            except ValueError as err:
                raise errors.InvalidError("dynamodb URL", f"endpoint={v!r} is malformed ({err})") from None
            if e.scheme not in ("http", "https") or not e.netloc or "@" in e.netloc or e.query or e.fragment:
                raise errors.InvalidError("dynamodb URL", f"endpoint={v!r}: want http(s)://host[:port]")
            try:
                port = e.port
            except ValueError as err:
                raise errors.InvalidError("dynamodb URL", f"endpoint={v!r}: bad port ({err})") from None
            if port == 0:
                raise errors.InvalidError("dynamodb URL", f"endpoint={v!r}: bad port 0")
            p["endpoint"] = v
        elif k == "max_clock_skew":
            skew = parse_duration(v)
            if not 0 <= skew <= 3600:
                raise errors.InvalidError("max clock skew", f"{v} is outside [0, 1h]")
            p["skew"] = skew
        elif k in ("consistent", "create", "ttl_cleanup", "one_write_region"):
            p[k] = _bool(k, v)
        elif k == "condition_values":
            _bool(k, v)  # an optimisation of the Go store (one read fewer); this client always reads
        else:
            raise errors.InvalidError("dynamodb URL", f"unknown parameter {k!r} (known: region, endpoint, max_clock_skew, "
                                                 "consistent, create, ttl_cleanup, condition_values, one_write_region)")
    return p
