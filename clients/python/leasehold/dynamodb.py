"""Leases directly on a DynamoDB table, in the Go store's layout (needs boto3).

``Client("dynamodb://TABLE?region=...&endpoint=...")`` returns a
``DynamoDBClient``. Each lease is one item keyed by ``LockKey``; every
operation is one conditional ``UpdateItem`` with the very expressions of the
Go store (package dynamodb, ops.go and item.go), so Go programs,
``leasehold run --store dynamodb://...``, the state machines of
``leasehold sfn`` and Python exclude each other, and the item's ``Token``
counter (never deleted) keeps fencing tokens increasing across all of them.

DynamoDB has no clock of its own: expiry (``ExpiresAtMs``) is written from
the writer's wall clock, and a lease is taken over only once
``ExpiresAtMs + max_clock_skew < now`` on the taker's clock. This is safe
while the clocks of all writers differ by less than ``max_clock_skew``
(default 1s, the same default as Go; every writer of a table must use the
same value or a larger one). The holder's own deadline is on
``time.monotonic()`` as everywhere in this package. Waiting polls with
jittered, capped backoff (DynamoDB cannot push).

Every request is bounded by the time its call has left (see
``DynamoDBClient``), and a lease's loss is reported by a timer at its
local deadline, whatever DynamoDB or the network do.

Leases, semaphores (a lease per permit, as Go's) and elections are offered
here; ``records`` and force release raise ``UnsupportedError`` (use the server).
"""

from __future__ import annotations

import datetime
import random
import time
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

from . import _bound, _cancel, _validate, errors
from ._core import (DEFAULT_TTL, MIN_REQUEST, ClientBase, Data, WaitCallback, _call_window, _random_id,
                    _with_request_id)
from ._dynamodb_recipes import DirectElection, DirectSemaphore
from ._dynamodb_table import _refuse_replicated, _watch_describe
from ._dynamodb_url import parse_url
from ._log import log
from .lease import Lease, LeaseInfo, LostCallback
from .lock import Lock, make_lock
from .records import Records

# The Go store's expressions (dynamodb/item.go), byte for byte.
ACQUIRE_UPDATE = "SET #o = :o, RequestId = :r, #d = :d, TtlMs = :ttl, ExpiresAtMs = :exp, Held = :t, AcquiredAtMs = :now ADD #k :one"
ACQUIRE_COND = "attribute_not_exists(LockKey) OR Held = :f OR ExpiresAtMs < :cut"
REFRESH_UPDATE = "SET #d = :d, TtlMs = :ttl, ExpiresAtMs = :exp"
REFRESH_COND = "#o = :o AND RequestId = :r AND #k = :k AND Held = :t AND ExpiresAtMs >= :now"
RENEW_UPDATE = "SET TtlMs = :ttl, ExpiresAtMs = :exp"
RENEW_COND = "#o = :o AND #k = :k AND Held = :t AND ExpiresAtMs >= :now"
# A release records its call's id in Rel0 .. Rel9, by its token's last decimal
# digit: a retry of the same call that finds the lease granted (and released)
# again since is told that the call ended its own grant.
RELEASE_UPDATE = "SET Held = :f, ExpiresAtMs = :zero, Rel{digit} = :rid"
RELEASE_COND = "#o = :o AND #k = :k"
CLEAN_SET = ", ExpiresAt = :clean"
LIST_FILTER = "begins_with(LockKey, :prefix)"
PLACEHOLDERS = {"#o": "Owner", "#k": "Token", "#d": "Data"}
CLEANUP_MARGIN_S = 7 * 24 * 3600
MAX_ACQUIRE_ROUNDS = 10
BATCH_GET_MAX = 100
"""Keys in one BatchGetItem (DynamoDB's limit)."""
MAX_CALL_ATTEMPTS = 4
"""Attempts of one DynamoDB request (connection failures, throttling, 5xx), within its call's time."""
TIMEOUT_STEPS: Tuple[float, ...] = tuple(round(0.05 * 2 ** (k / 2), 3) for k in range(26))
"""The socket timeouts (0.05 s to about 290 s, by √2) of the botocore clients made
for requests with less than the client's ``timeout`` left: a request goes
through the client of the largest step within its time left."""

def _names(*exprs: str) -> Dict[str, str]:
    joined = " ".join(exprs)
    return {ph: attr for ph, attr in PLACEHOLDERS.items() if ph in joined}


def _s(v: str) -> Dict[str, str]:
    return {"S": v}


def _n(v: int) -> Dict[str, str]:
    return {"N": str(v)}


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Row:
    """One decoded lease item (attributes other writers may leave out default to zero values)."""

    def __init__(self, item: Dict[str, Any]) -> None:
        def get(attr: str, typ: str, default: Any) -> Any:
            v = item.get(attr)
            if v is None:
                return default
            if typ not in v:
                raise errors.LeaseholdError(f"dynamodb: malformed lease item: {attr} is not of type {typ}")
            return v[typ]
        try:
            self.name: str = get("LockKey", "S", "")
            self.owner: str = get("Owner", "S", "")
            self.request_id: str = get("RequestId", "S", "")
            self.ttl_ms = int(get("TtlMs", "N", "0"))
            self.exp_ms = int(get("ExpiresAtMs", "N", "0"))
            self.acq_ms = int(get("AcquiredAtMs", "N", "0"))
            self.token = int(get("Token", "N", "0"))
        except ValueError as e:
            raise errors.LeaseholdError(f"dynamodb: malformed lease item: {e}") from None
        self.data: Optional[bytes] = bytes(get("Data", "B", b"")) or None
        self.held: bool = bool(get("Held", "BOOL", False))

    def live(self, now_ms: int) -> bool:
        return self.held and self.exp_ms >= now_ms

    def info(self, now_ms: int) -> LeaseInfo:
        return LeaseInfo(name=self.name, owner=self.owner, token=self.token, ttl=self.ttl_ms / 1000,
                         remaining=max(self.exp_ms - now_ms, 0) / 1000, acquired=_iso(self.acq_ms), data=self.data)

    def held_error(self, now_ms: int) -> errors.HeldError:
        return errors.HeldError(self.name, self.owner, self.token, max(self.exp_ms - now_ms, 0) / 1000, _iso(self.acq_ms))


class DynamoDBClient(ClientBase):
    """Leases on a DynamoDB table, sharing them with the Go store (see the module doc).

    ``DynamoDBClient(url, owner=None, timeout=10.0, rho=0.01, eps=0.005, boto_client=None,
    session=None, region_name=None, endpoint_url=None, config=None)``; it is what
    ``Client("dynamodb://...")`` returns. Credentials come from boto3's default
    chain (none found: ``InvalidError``, field ``credentials``), or from
    ``session`` (a ``boto3.session.Session``: a profile, assumed-role
    credentials). ``region_name`` and ``endpoint_url`` are boto3's names for
    the URL's ``region=`` and ``endpoint=`` (giving both with different
    values is an ``InvalidError``). ``config`` (a ``botocore.config.Config``:
    proxies, user agent, connection pool) is merged into the clients this one
    makes, whose timeouts and retries stay its own (see below).
    With ``create=true`` (the default, as in Go) the table is created if it
    is missing (on-demand, key ``LockKey``), waiting until it is ACTIVE.

    Every DynamoDB request is bounded by the time its call has left:
    ``timeout`` for a call without a timeout of its own (``try_acquire``,
    ``get``, ``release``, the constructor's), the time before the lease's
    deadline for a renewal, ``T + 0.5`` s for ``acquire(timeout=T)``. The
    client makes a botocore client per timeout class (socket timeouts of
    0.05 s to ``timeout``, stepping by √2, all made by the constructor) and
    retries a failed request itself, within the time left, at most 4
    times. ``boto_client`` is a boto3 DynamoDB client to use instead of
    those: its own ``Config`` (timeouts, retries) then bounds each request,
    so give it short ones; the lease's deadline timer fires on time either way.
    """

    def __init__(self, url: str, token: Optional[str] = None, *, owner: Optional[str] = None,
                 timeout: float = 10.0, rho: float = 0.01, eps: float = 0.005, boto_client: Any = None,
                 session: Any = None, region_name: Optional[str] = None, endpoint_url: Optional[str] = None,
                 config: Any = None) -> None:
        self._init_common(owner, timeout, rho, eps)
        p = parse_url(url)
        for field, given, in_url in (("region_name", region_name, "region"), ("endpoint_url", endpoint_url, "endpoint")):
            if given is None:
                continue
            if not isinstance(given, str) or not given:
                raise errors.InvalidError(field, f"{given!r} is not a non-empty str")
            if p[in_url] is not None and p[in_url] != given:
                raise errors.InvalidError(field, f"{given!r} differs from the URL's {in_url}={p[in_url]!r}: give one")
            parse_url(f"dynamodb://{p['table']}?{in_url}={urllib.parse.quote(given, safe=':/')}")  # the URL's rules
            p[in_url] = given
        if session is not None and not callable(getattr(session, "client", None)):
            raise errors.InvalidError("session", f"must be a boto3.session.Session, not {type(session).__name__}")
        if boto_client is not None and (session is not None or config is not None):
            raise errors.InvalidError("boto_client", "with boto_client=, session= and config= are not used: give one")
        self.table: str = p["table"]
        self.max_clock_skew: float = p["skew"]
        self._skew_ms = int(-(-p["skew"] * 1000 // 1))  # rounded up to whole ms, as in Go
        self._consistent, self._ttl_cleanup = p["consistent"], p["ttl_cleanup"]
        try:
            import boto3
            import botocore.config
            import botocore.exceptions
        except ImportError:
            raise errors.UnsupportedError("dynamodb:// needs boto3: pip install 'leasehold[dynamodb]' "
                                     "(on Debian: apt-get install python3-boto3)") from None
        self._botoexc = botocore.exceptions
        self._config_class = botocore.config.Config
        if config is not None and not isinstance(config, botocore.config.Config):
            raise errors.InvalidError("config", f"must be a botocore.config.Config, not {type(config).__name__}")
        self._user_config = config
        self._own_client = boto_client is None
        self._clients: Dict[float, Any] = {}  # timeout class -> botocore client
        self._region: Optional[str] = p["region"]
        self._endpoint: Optional[str] = p["endpoint"]
        self._session: Any = None
        self._ddb: Any = boto_client
        try:
            if boto_client is None:
                try:
                    # A session of its own: credentials are looked up for this client
                    # (boto3's default session keeps what it found first), and its
                    # clients are all made here, in one thread (sessions are not thread-safe).
                    self._session = session if session is not None else boto3.session.Session()
                    if self._region is None and self._session.region_name is None:
                        if self._endpoint is None:
                            raise errors.InvalidError("dynamodb URL", "no region: add region= to the URL or set AWS_REGION")
                        self._region = "us-east-1"  # local endpoints ignore it, but requests are signed for one
                except self._botoexc.BotoCoreError as e:
                    raise self._botocore_error(e) from None
                self._ddb = self._make_client(self.timeout)
                # One per timeout class below the client's, made now: a call that made
                # one (under a lock its other threads wait on) spent part of its time
                # on it, on a loaded machine past its bound.
                self._clients = {s: self._make_client(s) for s in TIMEOUT_STEPS if s < self.timeout}
            end = time.monotonic() + self.timeout
            if p["create"]:
                self._create_table(end)
            if not self._own_client:
                _watch_describe(self._ddb)
            desc = self._call("describe_table", end, TableName=self.table)
            _refuse_replicated(self.table, (desc or {}).get("Table") or {}, p["one_write_region"])
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        where = f" endpoint={self._endpoint!r}" if self._endpoint else ""
        return (f"<leasehold.DynamoDBClient table={self.table!r} region={self._region!r}{where} "
                f"owner={self.owner!r} timeout={self.timeout}>")

    @property
    def records(self) -> Records:
        """Not offered on DynamoDB directly: raises ``UnsupportedError`` (records need the lease server)."""
        raise errors.UnsupportedError("records are offered by the lease server only (Client(\"http://...\").records), "
                                 "not directly on DynamoDB")

    def close(self) -> None:
        """Close the botocore clients' connections (those made here). Leases are not released."""
        if not self._own_client:
            return
        for c in [self._ddb, *self._clients.values()]:  # kept: a call after close() reconnects, bounded as before
            if c is not None and hasattr(c, "close"):
                c.close()

    # --- plumbing ---

    def _make_client(self, seconds: float) -> Any:
        cfg = self._config_class(connect_timeout=seconds, read_timeout=seconds,
                                 retries={"total_max_attempts": 1, "mode": "standard"})  # _call retries
        if self._user_config is not None:  # the caller's (proxies, user agent, pool, ...); timeouts and retries stay ours
            cfg = self._user_config.merge(cfg)
        try:
            c = self._session.client("dynamodb", region_name=self._region, endpoint_url=self._endpoint, config=cfg)
            _watch_describe(c)
        except self._botoexc.BotoCoreError as e:
            raise self._botocore_error(e) from None
        except (AttributeError, TypeError) as e:  # session= that is not a boto3 session
            raise errors.InvalidError("session", f"{type(self._session).__name__} does not make boto3 clients "
                                                 f"({e}): give a boto3.session.Session") from None
        return c

    def _client_for(self, left: float) -> Any:
        """The botocore client whose socket timeouts fit in ``left`` seconds: one
        the constructor made, so that no call spends its time making one."""
        clients = self._clients
        if not self._own_client or left >= self.timeout or not clients:
            return self._ddb
        step = max((s for s in clients if s <= left), default=min(clients))
        return clients[step]

    def _botocore_error(self, e: Exception) -> errors.LeaseholdError:
        """A botocore error (not an answer of DynamoDB) as this package's error."""
        x = self._botoexc
        if isinstance(e, (x.NoCredentialsError, x.PartialCredentialsError)):
            return errors.InvalidError("credentials", f"dynamodb: {e}: give AWS credentials (the environment, "
                                                 "~/.aws, an IAM role); nothing was sent")
        config = tuple(getattr(x, n) for n in ("ProfileNotFound", "NoRegionError", "InvalidConfigError",
                                               "InvalidRegionError", "UnknownServiceError") if hasattr(x, n))
        if isinstance(e, config):
            return errors.InvalidError("configuration", f"dynamodb: {e}")
        if isinstance(e, x.ParamValidationError):
            return errors.InvalidError("request", f"dynamodb: {e}")
        return errors.UnreachableError(f"dynamodb unreachable (the outcome is unknown): {e}")

    def _client_error(self, code: str, msg: str, status: int) -> Tuple[errors.LeaseholdError, bool]:
        """An error answer of DynamoDB as this package's error, and whether to retry it."""
        if code == "ResourceNotFoundException":
            return errors.LeaseholdError(f"dynamodb: table {self.table!r} does not exist "
                                         "(create it with create=true or \"leasehold store init\")"), False
        if code == "AccessDeniedException":
            return errors.ForbiddenError(403, "forbidden", code, msg), False
        if code in ("UnrecognizedClientException", "InvalidSignatureException", "MissingAuthenticationTokenException"):
            return errors.UnauthorizedError(401, "unauthorized", code, msg), False
        if code in ("ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"):
            return errors.RateLimitedError(429, "rate-limited", code, msg), True
        if code == "ValidationException":
            return errors.InvalidError("request", msg), False
        if status >= 500:
            return errors.UnreachableError(f"dynamodb: {code}: {msg} (the outcome is unknown)"), True
        return errors.LeaseholdError(f"dynamodb: {code}: {msg}"), False

    def _call(self, op: str, end: float, tolerate: Tuple[str, ...] = ("ConditionalCheckFailedException",),
              **kw: Any) -> Any:
        """Call boto3 within the time left before ``end`` (on ``time.monotonic()``),
        retrying connection failures, throttling and 5xx answers while time is
        left; translate its errors. An error answer whose code is in
        ``tolerate`` (by default a failed condition) is returned as None."""
        end = time.monotonic() + _bound.cut(end - time.monotonic(), f"dynamodb: {op}")  # a call's bound, if sooner
        attempt = 0
        while True:
            left = end - time.monotonic()
            if left < MIN_REQUEST:
                raise errors.UnreachableError(f"dynamodb: {op}: no time left for a request (timed out; "
                                         "the outcome of an earlier attempt is unknown)")
            try:
                return getattr(self._client_for(left), op)(**kw)
            except self._botoexc.ClientError as e:
                err = e.response.get("Error", {})
                code, msg = err.get("Code", ""), err.get("Message", "")
                if code in tolerate:
                    return None
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                mapped, retry = self._client_error(code, msg, status)
            except self._botoexc.BotoCoreError as e:
                mapped = self._botocore_error(e)
                retry = isinstance(e, (self._botoexc.ConnectionError, self._botoexc.HTTPClientError))
            attempt += 1
            pause = min(0.05 * 2 ** attempt, 1.0) * (0.5 + random.random() / 2)
            if not retry or attempt >= MAX_CALL_ATTEMPTS or end - time.monotonic() < pause + MIN_REQUEST:
                raise mapped from None
            log.info("dynamodb %s: attempt %d of %d failed: %s; retrying in %.3fs", op, attempt, MAX_CALL_ATTEMPTS,
                     mapped, pause)
            time.sleep(pause)

    def _create_table(self, end: float) -> None:
        if self._call("describe_table", end, tolerate=("ResourceNotFoundException",), TableName=self.table) is not None:
            return
        self._call("create_table", end, tolerate=("ResourceInUseException",),  # a concurrent creator won
                   TableName=self.table, BillingMode="PAY_PER_REQUEST",
                   AttributeDefinitions=[{"AttributeName": "LockKey", "AttributeType": "S"}],
                   KeySchema=[{"AttributeName": "LockKey", "KeyType": "HASH"}])
        active_end = time.monotonic() + 120
        while time.monotonic() < active_end:
            t = self._call("describe_table", min(time.monotonic() + self.timeout, active_end),
                           tolerate=("ResourceNotFoundException",), TableName=self.table)
            if t is not None and t["Table"].get("TableStatus") == "ACTIVE":
                return
            time.sleep(0.2)
        raise errors.LeaseholdError(f"dynamodb: table {self.table!r} is not ACTIVE after 120s")

    def _update(self, name: str, update: str, cond: str, values: Dict[str, Any], clean_at_ms: int, end: float,
                returns: bool = False) -> Optional[Dict[str, Any]]:
        if self._ttl_cleanup:
            update = update.replace(" ADD ", CLEAN_SET + " ADD ", 1) if " ADD " in update else update + CLEAN_SET
            values[":clean"] = _n(clean_at_ms // 1000 + CLEANUP_MARGIN_S)
        kw: Dict[str, Any] = dict(TableName=self.table, Key={"LockKey": _s(name)}, UpdateExpression=update,
                                  ConditionExpression=cond, ExpressionAttributeNames=_names(update, cond),
                                  ExpressionAttributeValues=values)
        if returns:
            kw["ReturnValues"] = "UPDATED_NEW"
        out = self._call("update_item", end, **kw)
        return None if out is None else (out.get("Attributes") or {})

    def _get_item(self, name: str, consistent: bool, end: float) -> Optional[Dict[str, Any]]:
        out = self._call("get_item", end, TableName=self.table, Key={"LockKey": _s(name)}, ConsistentRead=consistent)
        return out.get("Item") or None

    # --- the store operations (as the Go store's) ---

    def _grant(self, name: str, rid: str, ttl_ms: int, data: bytes, end: float) -> Tuple[int, int]:
        """One TryAcquire of the Go store: returns (token, acquired ms) or raises Held.
        Its requests (and a wait for the clock skew) end by ``end``."""
        rounds = 0
        while True:
            now = _now_ms()
            out = self._update(name, ACQUIRE_UPDATE, ACQUIRE_COND, {
                ":o": _s(self.owner), ":r": _s(rid), ":d": {"B": data}, ":ttl": _n(ttl_ms), ":exp": _n(now + ttl_ms),
                ":t": {"BOOL": True}, ":now": _n(now), ":one": _n(1), ":f": {"BOOL": False}, ":cut": _n(now - self._skew_ms),
            }, now + ttl_ms, end, returns=True)
            if out is not None:
                return int(out["Token"]["N"]), now
            item = self._get_item(name, True, end)
            now = _now_ms()
            if item:
                r = _Row(item)
                if r.live(now) and rid and r.owner == self.owner and r.request_id == rid:
                    ok = self._update(name, REFRESH_UPDATE, REFRESH_COND, {
                        ":o": _s(self.owner), ":r": _s(rid), ":k": _n(r.token), ":t": {"BOOL": True},
                        ":now": _n(now), ":d": {"B": data}, ":ttl": _n(ttl_ms), ":exp": _n(now + ttl_ms),
                    }, now + ttl_ms, end)
                    if ok is not None:
                        return r.token, r.acq_ms
                elif r.live(now):
                    raise r.held_error(now)
                elif r.held and r.exp_ms + self._skew_ms >= now:
                    # Expired by this clock; a holder whose clock is behind may count it held for up to the skew.
                    pause = (r.exp_ms + self._skew_ms + 1 - now) / 1000
                    if time.monotonic() + pause + MIN_REQUEST > end:
                        raise r.held_error(now)  # no time to wait it out: held, for this call
                    _cancel.sleep(pause)
                    if _cancel.cancelled():
                        raise r.held_error(_now_ms())  # the caller's loop stops
                    continue
            if rounds >= MAX_ACQUIRE_ROUNDS:
                raise errors.UnreachableError(f"dynamodb: lease {name!r} changed under {rounds + 1} acquire attempts in a row; try again")
            rounds += 1

    def _renew(self, name: str, owner: str, token: int, ttl: float, timeout: Optional[float], *,
               secret: str = "") -> None:
        # secret: the lease server's holder proof; DynamoDB has none.
        _validate.text("name", name, _validate.MAX_NAME)
        _validate.token(token)
        _validate.ttl(ttl)
        end = time.monotonic() + self._bounded(timeout)
        now, ttl_ms = _now_ms(), int(ttl * 1000)
        if self._update(name, RENEW_UPDATE, RENEW_COND, {
                ":o": _s(owner), ":k": _n(token), ":t": {"BOOL": True}, ":now": _n(now),
                ":ttl": _n(ttl_ms), ":exp": _n(now + ttl_ms)}, now + ttl_ms, end) is None:
            raise errors.NotHeldError(f"{name!r}: not held by {owner!r} with token {token}")

    def _release(self, name: str, owner: str, token: int, *, secret: str = "",
                 timeout: Optional[float] = None) -> None:
        _validate.text("name", name, _validate.MAX_NAME)
        _validate.token(token)
        end = time.monotonic() + self._bounded(timeout)
        rid = _random_id(8)
        rel = f"Rel{token % 10}"
        if self._update(name, RELEASE_UPDATE.format(digit=token % 10), RELEASE_COND, {
                ":o": _s(owner), ":k": _n(token), ":f": {"BOOL": False}, ":zero": _n(0),
                ":rid": _s(rid)}, _now_ms(), end) is None:
            # A retry (_call's, after a lost reply or a 5xx) of a release that
            # ended the grant fails its condition once another client took
            # the lease: the item's last release is then this call's.
            item = self._get_item(name, True, end)
            if item is not None and item.get(rel, {}).get("S") == rid:
                return
            raise errors.NotHeldError(f"{name!r}: not held by {owner!r} with token {token}")

    def _granted_to(self, names: List[str], rid: str, end: float) -> Dict[str, int]:
        """The live grants among ``names`` to this client's acquire ``rid`` (ones
        whose answers may have been lost), name -> token: one BatchGetItem (strongly
        consistent) per 100 names."""
        out: Dict[str, int] = {}
        for i in range(0, len(names), BATCH_GET_MAX):
            keys: List[Dict[str, Any]] = [{"LockKey": _s(n)} for n in names[i:i + BATCH_GET_MAX]]
            while keys:
                page = self._call("batch_get_item", end, RequestItems={
                    self.table: {"Keys": keys, "ConsistentRead": True}}) or {}
                now = _now_ms()
                for item in (page.get("Responses") or {}).get(self.table, []):
                    r = _Row(item)
                    if r.live(now) and r.owner == self.owner and r.request_id == rid:
                        out[r.name] = r.token
                keys = ((page.get("UnprocessedKeys") or {}).get(self.table) or {}).get("Keys") or []
                if keys and end - time.monotonic() < MIN_REQUEST:
                    raise errors.UnreachableError(f"dynamodb: batch_get_item: {len(keys)} keys left unprocessed "
                                                  "and no time left (timed out)")
        return out

    def _prepare(self, name: str, ttl: float, data: Data, request_id: Optional[str]) -> Tuple[str, int, bytes]:
        _validate.text("name", name, _validate.MAX_NAME)
        _validate.ttl(ttl)
        self._check_ttl(ttl)
        rid = request_id or _random_id()
        _validate.text("request id", rid, _validate.MAX_REQUEST_ID)
        if data is None:
            raw = b""
        elif isinstance(data, str):
            raw = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray)):
            raw = bytes(data)
        else:
            raise errors.InvalidError("data", f"must be bytes or str, not {type(data).__name__}")
        if len(raw) > _validate.MAX_DATA:
            raise errors.InvalidError("data", f"{len(raw)} bytes is more than the limit of {_validate.MAX_DATA}")
        return rid, int(ttl * 1000), raw

    def _try(self, name: str, rid: str, ttl_ms: int, raw: bytes, keepalive: bool,
             on_lost: Optional[LostCallback], end: float) -> Lease:
        """One attempt, its requests ending by ``end``; an ``UnreachableError`` names ``rid``."""
        t0 = time.monotonic()
        try:
            token, acq = self._grant(name, rid, ttl_ms, raw, end)
        except errors.UnreachableError as e:
            raise _with_request_id(e, rid)
        info = LeaseInfo(name=name, owner=self.owner, token=token, ttl=ttl_ms / 1000, remaining=ttl_ms / 1000,
                         acquired=_iso(acq), data=raw or None)
        return Lease(self, info, self.owner, ttl_ms / 1000, rid, t0, keepalive, on_lost)

    def _reclaim_grant(self, name: str, rid: str, ttl_ms: int, hard: float) -> None:
        """Release a grant that may have raced with giving up (the same request id
        gets exactly that grant back), only in the time left before ``hard``."""
        if hard - time.monotonic() < MIN_REQUEST:
            return
        try:
            token, _ = self._grant(name, rid, ttl_ms, b"", hard)
            left = hard - time.monotonic()
            if left < MIN_REQUEST:  # no time to give it back within the call's bound: it expires after its TTL
                log.debug("acquire %r: a grant that raced with giving up (token %d) expires after its TTL", name, token)
                return
            self._release(name, self.owner, token, timeout=left)
        except errors.LeaseholdError as e:  # none, or it expires after its TTL
            log.debug("acquire %r: releasing a grant that may have raced with giving up: %s", name, e)

    # --- the public API ---

    def try_acquire(self, name: str, ttl: float = DEFAULT_TTL, *, data: Data = None,
                    request_id: Optional[str] = None, keepalive: bool = True,
                    on_lost: Optional[LostCallback] = None) -> Lease:
        """One attempt (as ``Client.try_acquire``), bounded by the client's ``timeout``.
        A lease that expired less than ``max_clock_skew`` ago is waited for (at
        most the skew) before it is taken. TTLs are kept to whole milliseconds."""
        rid, ttl_ms, raw = self._prepare(name, ttl, data, request_id)
        return self._try(name, rid, ttl_ms, raw, keepalive, on_lost, time.monotonic() + self.timeout)

    def acquire(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
                data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
                on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Lease:
        """Take the lease, polling with jittered exponential backoff (2 ms to 250 ms, as
        the Go client) that never sleeps past the holder's expiry; every attempt
        uses one request id, so a lost reply never makes it wait behind its own
        grant. Raises the last ``HeldError`` (or error) after ``timeout`` seconds, and
        returns within ``timeout`` + 0.5 s whatever DynamoDB does; an
        ``UnreachableError`` names the ``request_id`` to retry with (as ``Client.acquire``)."""
        rid, ttl_ms, raw = self._prepare(name, ttl, data, request_id)
        end, hard = _call_window(timeout)
        cap, attempt, unknown, waited = 0.002, 0, False, False
        last: Optional[errors.LeaseholdError] = None
        started = time.monotonic()
        while True:
            if _cancel.cancelled():  # leasehold.aio: the await was cancelled, or the client closed
                log.info("acquire %r was cancelled: stopped polling after %d attempts", name, attempt)
                if unknown:  # a grant may exist: the same request id gets it back
                    self._reclaim_grant(name, rid, ttl_ms, time.monotonic() + self.timeout)
                raise _cancel.stop(f"acquire {name!r}")
            now = time.monotonic()
            try:
                lease = self._try(name, rid, ttl_ms, raw, keepalive, on_lost,
                                  now + self.timeout if hard is None else min(now + self.timeout, hard))
                if attempt:
                    log.info("acquired %r (token %d) after waiting %.3fs", name, lease.token, time.monotonic() - started)
                return lease
            except errors.HeldError as e:
                if not waited:
                    waited = True
                    log.info("waiting for %r: held by %r (token %d, %.3fs left)", name, e.owner, e.token, e.remaining)
                    if on_wait is not None:
                        on_wait(e)
                last, unknown = e, False
                pause = min(cap * (0.5 + random.random() / 2), e.remaining + 0.001)
            except (errors.UnreachableError, errors.RateLimitedError) as e:
                last, unknown = e, True
                pause = cap * (0.5 + random.random() / 2)
                log.warning("acquire %r: attempt %d failed: %s; retrying in %.3fs", name, attempt + 1, e, pause)
            attempt += 1
            cap = min(cap * 2, 0.25)
            if end is not None and hard is not None:
                left = end - time.monotonic()
                if left <= 0:
                    log.info("gave up acquiring %r after %.3fs (timeout %ss): %s", name, time.monotonic() - started,
                             timeout, last)
                    if unknown:  # a grant may have raced with giving up: the same request id gets it back
                        self._reclaim_grant(name, rid, ttl_ms, hard)
                    if isinstance(last, errors.UnreachableError):
                        raise _with_request_id(last, rid)
                    raise last
                pause = min(pause, left)
            _cancel.sleep(max(pause, 0.0))

    def lease(self, name: str, ttl: float = DEFAULT_TTL, timeout: Optional[float] = None, *,
              data: Data = None, request_id: Optional[str] = None, keepalive: bool = True,
              on_lost: Optional[LostCallback] = None, on_wait: Optional[WaitCallback] = None) -> Lease:
        """``acquire`` for a ``with`` block: ``with client.lease("jobs/nightly", ttl=30) as lease: ...``.
        The lease is released when the block ends; see ``Lease``."""
        return self.acquire(name, ttl, timeout, data=data, request_id=request_id, keepalive=keepalive,
                            on_lost=on_lost, on_wait=on_wait)

    def lock(self, name: str, ttl: float = DEFAULT_TTL, blocking_timeout: Optional[float] = None, *,
             data: Data = None, on_lost: Optional[LostCallback] = None, timeout: None = None) -> Lock:
        """A reusable lock on ``name`` shaped like redis-py's (see ``leasehold.lock.Lock``):
        ``ttl`` is a grant's time to live, ``blocking_timeout`` how long ``acquire``
        waits (None: without end). Nothing is sent until ``acquire``. ``timeout=`` is
        refused with ``InvalidError``: redis-py's ``timeout`` is the TTL, threading's a wait."""
        return make_lock(self, name, ttl, blocking_timeout, data, on_lost, timeout)

    def get(self, name: str) -> LeaseInfo:
        """The live lease ``name`` (judged by this machine's clock); raises ``NotFoundError``."""
        _validate.text("name", name, _validate.MAX_NAME)
        item = self._get_item(name, self._consistent, time.monotonic() + self.timeout)
        now = _now_ms()
        if not item or not _Row(item).live(now):
            raise errors.NotFoundError(f"{name!r}: not found")
        return _Row(item).info(now)

    def list(self, prefix: str = "") -> List[LeaseInfo]:
        """The live leases whose names start with ``prefix``, by a Scan of the whole
        table (for operators, not hot paths), sorted by name."""
        kw: Dict[str, Any] = dict(TableName=self.table, ConsistentRead=self._consistent)
        if prefix:
            _validate.text("prefix", prefix, _validate.MAX_NAME)
            kw.update(FilterExpression=LIST_FILTER, ExpressionAttributeValues={":prefix": _s(prefix)})
        out: List[LeaseInfo] = []
        while True:
            page = self._call("scan", time.monotonic() + self.timeout, **kw)
            now = _now_ms()
            for item in page.get("Items", []):
                r = _Row(item)
                if r.live(now) and r.name.startswith(prefix):
                    out.append(r.info(now))
            if not page.get("LastEvaluatedKey"):
                break
            kw["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return sorted(out, key=lambda i: i.name)

    def force_release(self, name: str) -> LeaseInfo:
        raise errors.UnsupportedError("force release is not offered on DynamoDB directly (the Go store has none either)")

    def semaphore(self, name: str, permits: int) -> DirectSemaphore:
        """At most ``permits`` holders of ``name``: permit I is the lease ``name/permit/I``,
        shared with Go's ``Semaphore`` and ``leasehold run --permits`` on the same table."""
        return DirectSemaphore(self, name, permits)

    def election(self, name: str) -> DirectElection:
        """The election ``name``: a lease whose token is the leader's term."""
        return DirectElection(self, name)
