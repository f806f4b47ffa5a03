"""leasehold for asyncio: the API of ``leasehold`` with ``await`` and ``async with``.

    from leasehold.aio import Client
    client = Client("http://127.0.0.1:7070")
    async with client.lease("jobs/nightly", ttl=30) as lease:
        await write_somewhere(fence=lease.token)

Leases are renewed by a task of the running event loop. The server client
uses the standard library's asyncio streams; ``Client("dynamodb://...")``
runs boto3's calls in worker threads (there is no asyncio AWS client in
the standard library). The exceptions are ``leasehold``'s.
"""

from typing import Any

from .._core import DEFAULT_TTL
from ..lease import LeaseInfo
from . import client as _client
from .client import Client, Election, LeaseContext, Semaphore
from .lease import Lease
from .lock import Lock
from .records import Records


def _dynamodb_client(url: str, *args: Any, **kw: Any) -> Any:
    from .dynamodb import DynamoDBClient
    return DynamoDBClient(url, *args, **kw)


_client._SCHEMES["dynamodb:"] = _dynamodb_client


def __getattr__(name: str) -> Any:
    if name == "DynamoDBClient":
        from .dynamodb import DynamoDBClient
        return DynamoDBClient
    raise AttributeError(f"module 'leasehold.aio' has no attribute {name!r}")


__all__ = ["Client", "DynamoDBClient", "Election", "Lease", "LeaseContext", "LeaseInfo", "Lock", "Records",
           "Semaphore", "DEFAULT_TTL"]
