"""Whether a missing engine fails a test or lets it skip, decided as the Go
tests decide it (testrig/enginetest): LEASEHOLD_REQUIRE_ENGINES, read as a
boolean the way Go's strconv.ParseBool reads one (1, t, true, 0, f, false,
in any of Go's spellings), wins; without it, CI set to a true boolean (as
CI services set CI=true) requires the engines. Any other value of
LEASEHOLD_REQUIRE_ENGINES is an error, not a quiet skip."""

from __future__ import annotations

import os
import unittest

REQUIRE_VAR = "LEASEHOLD_REQUIRE_ENGINES"

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _parse_bool(v: str):
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    return None


def required() -> tuple:
    """(required, why): why names the variable that decided it."""
    v = os.environ.get(REQUIRE_VAR, "")
    if v != "":
        on = _parse_bool(v)
        if on is None:
            raise RuntimeError(
                f"{REQUIRE_VAR}={v!r} is not a boolean (want 1 to require the engines, 0 to let their tests skip)")
        return on, f"{REQUIRE_VAR}={v}"
    ci = os.environ.get("CI", "")
    if _parse_bool(ci):
        return True, f"CI={ci}"
    return False, ""


def missing(what: str) -> None:
    """Fails (engines required) or skips (not required) for a missing
    engine or tool named by what."""
    on, why = required()
    if on:
        raise RuntimeError(f"missing {what} ({why})")
    raise unittest.SkipTest(f"missing {what}")
