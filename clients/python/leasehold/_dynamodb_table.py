"""What the DynamoDB client reads of its table: a global table's replicas and
consistency (refused as the Go store refuses them), with DescribeTable answers
kept whole on an old botocore."""

from __future__ import annotations

import json
from typing import Any, Dict

from . import errors


def _refuse_replicated(table: str, t: Dict[str, Any], one_write_region: bool) -> None:
    """Refuse a replica of a global table, as the Go store's Open does (``ErrReplicatedTable``),
    with the same message.

    Global tables settle writes made in two regions at once by last writer wins, so
    two processes could each be granted the same lease in their own region. A table
    whose every writer uses one region is accepted with ``one_write_region=true``,
    unless it is of multi-Region strong consistency (``STRONG``): refused whatever the
    option (leasehold has not been run against one, and they do not support the
    transactions its records use)."""
    consistency = t.get("MultiRegionConsistency")
    strong = consistency == "STRONG"
    replicas = t.get("Replicas") or []
    version = t.get("GlobalTableVersion")
    if not strong and (one_write_region or (not replicas and not version)):
        return
    what = f"global table version {_visible(str(version or ''))}"
    if replicas:
        names = [_visible(str(r.get("RegionName", ""))) for r in replicas[:_MAX_REGIONS_SHOWN]]
        what = "replicas in " + ", ".join(names)
        if len(replicas) > _MAX_REGIONS_SHOWN:
            what += f" and {len(replicas) - _MAX_REGIONS_SHOWN} more"
    if consistency:
        what += f", consistency {_visible(str(consistency))}"
    head = f"dynamodb: the table is replicated to other regions (a global table): \"{table}\" has {what}. "
    if strong:
        raise errors.UnsupportedError(
            head + "Tables of multi-Region strong consistency are not supported, with or without "
            "one_write_region=true: leasehold has not been run against one, and they do not support the "
            "transactions its records use. Use a table that is not replicated")
    raise errors.UnsupportedError(
        head + "Writes made in two regions at once are settled by last writer wins, so two processes could each "
        "be granted the same lease in their own region. Send every lease and record request for this table to "
        "one region and open it with one_write_region=true, or use a table that is not replicated")


def _watch_describe(client: Any) -> None:
    """Have ``client``'s DescribeTable answers keep MultiRegionConsistency (_keep_consistency);
    the unique_id registers it once on a client the caller gave, however many wrap it."""
    client.meta.events.register("after-call.dynamodb.DescribeTable", _keep_consistency,
                                unique_id="leasehold-keep-consistency")


def _keep_consistency(http_response: Any = None, parsed: Any = None, **_: Any) -> None:
    """Put ``MultiRegionConsistency`` back into a DescribeTable answer from its raw JSON.

    A botocore whose model predates the field (1.29, Debian 12's) drops it from the
    parsed answer, and a table of multi-Region strong consistency then looked like an
    eventual one (accepted with one_write_region=true: issue 31 red team)."""
    table = parsed.get("Table") if isinstance(parsed, dict) else None
    if not isinstance(table, dict) or "MultiRegionConsistency" in table:
        return
    try:
        raw = json.loads(http_response.content)["Table"].get("MultiRegionConsistency")
    except (AttributeError, KeyError, TypeError, ValueError):
        return
    if isinstance(raw, str):
        table["MultiRegionConsistency"] = raw


# The regions a refusal names at most: an answer may claim thousands.
_MAX_REGIONS_SHOWN = 5


def _visible(s: str) -> str:
    """``s`` escaped for a terminal as the Go command and the dashboard show names:
    printable ASCII as it is, a backslash doubled, a space at either end or beside
    another as \\x20, everything else escaped (\\n, \\x1B, \\u202E, \\u{E0041})."""
    if all(0x21 <= ord(c) <= 0x7E and c != "\\" for c in s):
        return s
    out = []
    for i, c in enumerate(s):
        o = ord(c)
        if c == "\\":
            out.append("\\\\")
        elif c in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c])
        elif c == " ":
            inner = 0 < i < len(s) - 1 and s[i - 1] != " " and s[i + 1] != " "
            out.append(" " if inner else "\\x20")
        elif 0x20 < o < 0x7F:
            out.append(c)
        elif o < 0x100:
            out.append(f"\\x{o:02X}")
        elif o > 0xFFFF:
            out.append(f"\\u{{{o:05X}}}")
        else:
            out.append(f"\\u{o:04X}")
    return "".join(out)
