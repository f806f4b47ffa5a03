"""The HTTP transport: one request per connection, problem documents mapped to exceptions."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.parse
from typing import Any, Dict, Optional, Tuple

from . import _bound, errors

PROBLEM_PREFIX = "urn:leasehold:problem:"
MAX_ANSWER = 4 << 20


def name_path(*parts: str) -> str:
    """Join path parts; each part may contain '/', whose segments are percent-encoded one by one."""
    out = []
    for p in parts:
        if not isinstance(p, str):
            raise errors.InvalidError("name", f"must be a str, not {type(p).__name__}")
        out.append("/".join(urllib.parse.quote(seg, safe="") for seg in p.split("/")))
    return "/" + "/".join(out)


class Transport:
    """Sends requests to one server. Safe for concurrent use: every request
    opens its own connection (leases are few and long, so this costs little)."""

    def __init__(self, url: str, token: Optional[str], timeout: float,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        if not isinstance(url, str):
            raise errors.InvalidError("url", f"must be a str, not {type(url).__name__}")
        try:
            u = urllib.parse.urlsplit(url)
        except ValueError as e:  # "http://[::1": urllib's own ValueError
            raise errors.InvalidError("url", f"{url!r} is malformed ({e})") from None
        if u.scheme not in ("http", "https") or not u.hostname:
            raise errors.InvalidError("url", f"{url!r} is not an http:// or https:// server address")
        if u.path not in ("", "/") or u.query or u.fragment:
            raise errors.InvalidError("url", f"{url!r}: give only scheme, host and port")
        try:
            port = u.port
        except ValueError as e:  # "http://host:99999", "http://host:x"
            raise errors.InvalidError("url", f"{url!r}: bad port ({e}): give a port in 1-65535") from None
        if port == 0:
            raise errors.InvalidError("url", f"{url!r}: bad port 0: give a port in 1-65535")
        self.scheme, self.host, self.port = u.scheme, u.hostname, port
        self.safe_url = f"{u.scheme}://{u.netloc.rpartition('@')[2]}"
        """The URL without user information (a password may be there): for messages and reprs."""
        self.token, self.timeout = token, timeout
        self._ssl = (ssl_context or ssl.create_default_context()) if u.scheme == "https" else None

    def request(self, method: str, path: str, body: Any = None, *, raw: Optional[bytes] = None,
                query: Optional[Dict[str, str]] = None, headers: Optional[Dict[str, str]] = None,
                wait: float = 0.0, name: str = "", timeout: Optional[float] = None) -> Tuple[int, Dict[str, str], Any]:
        """Send one request; return (status, headers (lower-case names), decoded JSON or None).

        A 2xx answer is returned; a problem document is raised as the matching
        exception; a transport failure or a malformed answer is raised as
        ``UnreachableError`` (the outcome is unknown). ``timeout`` (if given, else
        the transport's timeout plus ``wait``) bounds the whole request:
        connecting, sending and reading the answer.
        """
        path, hdrs, data = self.prepare(path, body, raw, query, headers)
        if timeout is None:
            timeout = self.timeout + wait
        timeout = _bound.cut(timeout, f"leasehold server: {method} {path}")
        deadline = time.monotonic() + timeout

        def rest() -> float:  # each socket operation gets the time left of the whole request
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("timed out")
            return left

        if self._ssl is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.connect()
            sock = conn.sock  # kept: getresponse() hands it to the response when the answer closes the connection
            sock.settimeout(rest())
            conn.request(method, path, body=data, headers=hdrs)
            sock.settimeout(rest())
            resp = conn.getresponse()
            sock.settimeout(rest())
            payload = resp.read(MAX_ANSWER)
            status = resp.status
            rh = {k.lower(): v for k, v in resp.getheaders()}
        except (OSError, http.client.HTTPException) as e:
            raise errors.UnreachableError(
                f"leasehold server unreachable (the outcome is unknown): {method} {path}: {e}") from e
        finally:
            conn.close()
        return decode_answer(method, path, status, rh, payload, name)

    def prepare(self, path: str, body: Any, raw: Optional[bytes], query: Optional[Dict[str, str]],
                headers: Optional[Dict[str, str]]) -> Tuple[str, Dict[str, str], Optional[bytes]]:
        """A request's path with its query, its headers and its body (both transports')."""
        hdrs = {"Accept": "application/json"}
        data: Optional[bytes] = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        elif raw is not None:
            data = raw
            hdrs["Content-Type"] = "application/octet-stream"
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        if headers:
            hdrs.update(headers)
        if query:
            path += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return path, hdrs, data


def decode_answer(method: str, path: str, status: int, headers: Dict[str, str], payload: bytes,
                  name: str) -> Tuple[int, Dict[str, str], Any]:
    """(status, headers, decoded JSON or None) of a 2xx answer; raise a problem as its exception."""
    if status // 100 != 2:
        raise problem_error(status, headers, payload, name)
    if status == 204 or not payload or not headers.get("content-type", "").startswith("application/json"):
        return status, headers, None
    try:
        return status, headers, json.loads(payload)
    except ValueError as e:
        raise errors.UnreachableError(f"leasehold server: malformed answer to {method} {path}: {e}") from e


def problem_error(status: int, headers: Dict[str, str], payload: bytes, name: str) -> errors.LeaseholdError:
    """Map a problem document (RFC 9457) to this package's exceptions."""
    p: Dict[str, Any] = {}
    ct = headers.get("content-type", "")
    try:
        if ct.startswith("application/problem+json"):
            p = json.loads(payload)
    except ValueError:
        p = {}
    typ = p.get("type", "") if isinstance(p, dict) else ""
    if not isinstance(typ, str) or not typ.startswith(PROBLEM_PREFIX):
        snippet = payload[:200].decode("utf-8", "replace").strip()
        return errors.UnreachableError(f"leasehold server: unexpected answer {status} (not a leasehold problem document): {snippet}")
    typ = typ[len(PROBLEM_PREFIX):]
    detail = p.get("detail", "") or ""
    if typ == "held":
        h = p.get("holder") or {}
        return errors.HeldError(name, owner=h.get("owner", ""), token=int(h.get("token", 0)),
                           remaining=int(h.get("remaining_ms", 0)) / 1000.0,
                           acquired=h.get("acquired", ""), permits=p.get("permits"), detail=detail)
    if typ == "not-held":
        return errors.NotHeldError(detail or f"{name!r}: not held by that owner and token")
    if typ == "bad-proof":
        return errors.BadProofError(f"{name!r}: " + (detail or "the holder proof (secret) is missing or does not match the grant"))
    if typ == "not-found":
        return errors.NotFoundError(detail or f"{name!r}: not found")
    if typ == "invalid":
        return errors.InvalidError(p.get("field") or "request", p.get("reason") or detail)
    if typ in ("precondition-failed", "conflict"):
        return errors.ConflictError(p.get("key", name), int(p.get("expected_version", 0)),
                               int(p.get("current_version", 0)), detail)
    retry_after: Optional[float] = None
    ra = headers.get("retry-after", "")
    if ra.isdigit():
        retry_after = float(ra)
    cls = errors._PROBLEM_CLASSES.get(typ, errors.ProblemError)
    return cls(status, typ, p.get("title", ""), detail, retry_after)
