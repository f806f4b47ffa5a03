"""leasehold: leases with fencing tokens, semaphores, elections and versioned
records for Python, sharing them with Go, the ``leasehold`` CLI and Step
Functions through a leasehold server (``leasehold serve``).

    from leasehold import Client
    client = Client("http://127.0.0.1:7070")
    with client.lease("jobs/nightly", ttl=30) as lease:
        write_somewhere(fence=lease.token)

The server client needs only the standard library.
"""

from . import client as _client
from .client import DEFAULT_TTL, Client, Election, Semaphore
from .errors import (BadProof, Conflict, Forbidden, Held, Invalid, LeaseholdError, Lost, NoSession, NotFound,
                     NotHeld, ProblemError, QuotaExceeded, RateLimited, Released, Unauthorized, Unavailable, Unreachable,
                     Unsupported)
from .lease import Lease, LeaseInfo
from .records import Record, Records, RetriesExhausted, Write


# client.py and dynamodb.py do not import each other: the package joins them.
# dynamodb.py is imported when first used (as is boto3, by DynamoDBClient).

def _dynamodb_client(url: str, *args, **kw) -> "Client":
    from .dynamodb import DynamoDBClient
    return DynamoDBClient(url, *args, **kw)


_client._SCHEMES["dynamodb:"] = _dynamodb_client  # Client("dynamodb://...") is a DynamoDBClient


def __getattr__(name: str):
    if name == "DynamoDBClient":
        from .dynamodb import DynamoDBClient
        return DynamoDBClient
    raise AttributeError(name)


__all__ = [
    "Client", "Election", "Semaphore", "Lease", "LeaseInfo", "Record", "Records", "Write", "DEFAULT_TTL",
    "LeaseholdError", "Held", "NotHeld", "BadProof", "NotFound", "Lost", "Released", "Conflict", "RetriesExhausted",
    "Invalid", "ProblemError", "Unauthorized", "Forbidden", "RateLimited", "QuotaExceeded", "Unavailable", "NoSession",
    "Unreachable", "Unsupported", "DynamoDBClient",
]
__version__ = "0.1.0"
