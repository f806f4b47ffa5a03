"""leasehold: leases with fencing tokens, semaphores, elections and versioned
records for Python, sharing them with Go, the ``leasehold`` CLI and Step
Functions through a leasehold server (``leasehold serve``).

    from leasehold import Client
    client = Client("http://127.0.0.1:7070")
    with client.lease("jobs/nightly", ttl=30) as lease:
        write_somewhere(fence=lease.token)

The server client needs only the standard library. ``leasehold.aio`` is the
same API for asyncio.
"""

from typing import TYPE_CHECKING, Any

from . import client as _client
from ._core import DEFAULT_TTL
from .client import Client, Election, Semaphore
from .errors import (BadProof, BadProofError, Conflict, ConflictError, Forbidden, ForbiddenError, Held, HeldError,
                     Invalid, InvalidError, LeaseholdError, MismatchError, Lost, LostError, NoSession, NoSessionError, NotFound,
                     NotFoundError, NotHeld, NotHeldError, ProblemError, QuotaExceeded, QuotaExceededError,
                     RateLimited, RateLimitedError, Released, ReleasedError, Unauthorized, UnauthorizedError,
                     Unavailable, UnavailableError, Unreachable, UnreachableError, Unsupported, UnsupportedError)
from .lease import Lease, LeaseInfo
from .lock import Lock
from .records import Record, Records, RetriesExhausted, RetriesExhaustedError, Write

if TYPE_CHECKING:  # pragma: no cover
    from .dynamodb import DynamoDBClient


# client.py and dynamodb.py do not import each other: the package joins them.
# dynamodb.py is imported when first used (as is boto3, by DynamoDBClient).

def _dynamodb_client(url: str, *args: Any, **kw: Any) -> "DynamoDBClient":
    from .dynamodb import DynamoDBClient
    return DynamoDBClient(url, *args, **kw)


_client._SCHEMES["dynamodb:"] = _dynamodb_client  # Client("dynamodb://...") is a DynamoDBClient


def __getattr__(name: str) -> Any:
    if name == "DynamoDBClient":
        from .dynamodb import DynamoDBClient
        return DynamoDBClient
    raise AttributeError(f"module 'leasehold' has no attribute {name!r}")


__all__ = [
    "Client", "Election", "Semaphore", "Lease", "LeaseInfo", "Lock", "Record", "Records", "Write", "DEFAULT_TTL",
    "DynamoDBClient",
    "LeaseholdError", "HeldError", "NotHeldError", "BadProofError", "NotFoundError", "LostError", "ReleasedError",
    "ConflictError", "RetriesExhaustedError", "InvalidError", "MismatchError", "ProblemError", "UnauthorizedError", "ForbiddenError",
    "RateLimitedError", "QuotaExceededError", "UnavailableError", "NoSessionError", "UnreachableError",
    "UnsupportedError",
    # The names before issue 29, aliases of the classes above.
    "Held", "NotHeld", "BadProof", "NotFound", "Lost", "Released", "Conflict", "RetriesExhausted", "Invalid",
    "Unauthorized", "Forbidden", "RateLimited", "QuotaExceeded", "Unavailable", "NoSession", "Unreachable",
    "Unsupported",
]
__version__ = "0.1.0"
