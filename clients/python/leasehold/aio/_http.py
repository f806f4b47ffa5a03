"""The HTTP transport of the asyncio client: one request per connection over
asyncio streams (the standard library has no asyncio HTTP client), with the
blocking transport's encoding of requests and reading of answers."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Dict, Optional, Tuple

from .. import _bound, errors
from .._http import MAX_ANSWER, Transport, decode_answer

MAX_HEAD = 64 << 10
"""Bytes of an answer's status line and headers."""


class AsyncTransport:
    """Sends requests to one server; safe for concurrent tasks (a connection per request)."""

    def __init__(self, url: str, token: Optional[str], timeout: float,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self._enc = Transport(url, token, timeout, ssl_context)  # checks the URL, encodes requests
        self.timeout = timeout
        host = self._enc.host
        self._port = self._enc.port or (443 if self._enc.scheme == "https" else 80)
        bracketed = f"[{host}]" if ":" in host else host
        self._host_header = bracketed if self._enc.port is None else f"{bracketed}:{self._enc.port}"

    async def request(self, method: str, path: str, body: Any = None, *, raw: Optional[bytes] = None,
                      query: Optional[Dict[str, str]] = None, headers: Optional[Dict[str, str]] = None,
                      wait: float = 0.0, name: str = "",
                      timeout: Optional[float] = None) -> Tuple[int, Dict[str, str], Any]:
        """As ``Transport.request``: ``timeout`` (else the transport's plus ``wait``) bounds
        connecting, sending and reading the answer; a transport failure or a malformed
        answer is ``UnreachableError``. Cancelling the task closes the connection."""
        path, hdrs, data = self._enc.prepare(path, body, raw, query, headers)
        if timeout is None:
            timeout = self.timeout + wait
        timeout = _bound.cut(timeout, f"leasehold server: {method} {path}")
        try:
            status, rh, payload = await asyncio.wait_for(self._roundtrip(method, path, hdrs, data), timeout)
        except (OSError, EOFError, ValueError, asyncio.TimeoutError, asyncio.LimitOverrunError) as e:
            what = "timed out" if isinstance(e, asyncio.TimeoutError) else str(e) or type(e).__name__
            raise errors.UnreachableError(
                f"leasehold server unreachable (the outcome is unknown): {method} {path}: {what}") from e
        return decode_answer(method, path, status, rh, payload, name)

    async def _roundtrip(self, method: str, path: str, hdrs: Dict[str, str],
                         data: Optional[bytes]) -> Tuple[int, Dict[str, str], bytes]:
        ctx = self._enc._ssl
        reader, writer = await asyncio.open_connection(self._enc.host, self._port, ssl=ctx,
                                                       server_hostname=self._enc.host if ctx else None)
        try:
            head = [f"{method} {path} HTTP/1.1", f"Host: {self._host_header}", "Connection: close",
                    f"Content-Length: {len(data or b'')}"]
            head += [f"{k}: {v}" for k, v in hdrs.items()]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("utf-8") + (data or b""))
            await writer.drain()
            status, rh = await _read_head(reader)
            if rh.get("transfer-encoding", "").lower() == "chunked":
                payload = await _read_chunked(reader)
            elif "content-length" in rh:
                n = int(rh["content-length"])
                if n > MAX_ANSWER:
                    raise ValueError(f"answer of {n} bytes is larger than {MAX_ANSWER}")
                payload = await reader.readexactly(n)
            else:
                payload = await reader.read(MAX_ANSWER)
            return status, rh, payload
        finally:
            writer.close()


async def _read_head(reader: asyncio.StreamReader) -> Tuple[int, Dict[str, str]]:
    line = await reader.readline()
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {line[:80]!r}")
    status, size = int(parts[1]), len(line)
    rh: Dict[str, str] = {}
    while True:
        line = await reader.readline()
        size += len(line)
        if size > MAX_HEAD:
            raise ValueError(f"answer headers longer than {MAX_HEAD} bytes")
        if line in (b"\r\n", b"\n"):
            return status, rh
        if not line:
            raise EOFError("connection closed in the answer's headers")
        k, sep, v = line.decode("latin-1").partition(":")
        if not sep:
            raise ValueError(f"malformed header line {line[:80]!r}")
        rh[k.strip().lower()] = v.strip()


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";", 1)[0].strip() or b"x", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(out)
        if len(out) + size > MAX_ANSWER:
            raise ValueError(f"answer larger than {MAX_ANSWER} bytes")
        out += await reader.readexactly(size)
        await reader.readexactly(2)
