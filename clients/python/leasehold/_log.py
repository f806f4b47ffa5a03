"""The package's logger, ``logging.getLogger("leasehold")``. Levels:

- DEBUG: grants, renewals, releases, and failures that change nothing (a
  quiet release of a grant that raced with giving up);
- INFO: waits (queued behind a holder, granted after a wait, gave up), a
  DynamoDB request retried inside its call;
- WARNING: retries of an acquire after an error, a keepalive renewal that
  failed (the lease is at risk: it is lost at its deadline unless a retry
  succeeds), a release that failed after a ``with`` block raised;
- ERROR: a lease lost, and an exception raised by an ``on_lost`` callback
  (swallowed there, so that the loss is still seen; logged with its
  traceback).

The package adds a ``NullHandler`` only: configure ``logging`` to see them.
"""

from __future__ import annotations

import logging

log = logging.getLogger("leasehold")
log.addHandler(logging.NullHandler())
