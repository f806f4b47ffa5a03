"""boto3's own names on the DynamoDB client (issue 29, item 13): session=,
region_name=, endpoint_url= and a botocore Config, against dynalite."""

from __future__ import annotations

import os
import time
import unittest
import urllib.parse

import leasehold
from leasehold import InvalidError

from server import uniq
from test_dynamodb import table_url


class _NotASession:
    """Has a client method, which does not make boto3 clients (an AttributeError escaped)."""

    region_name = "us-east-1"

    def client(self, *args: object, **kw: object) -> int:
        return 1


class BotoOptionsTest(unittest.TestCase):
    def setUp(self) -> None:
        url = table_url("leasehold_py_test")  # skips or fails without dynalite and boto3
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        self.endpoint, self.region = q["endpoint"][0], q["region"][0]

    def test_session_region_endpoint_and_config(self) -> None:
        import boto3
        import botocore.config
        # Credentials only in the session (the environment's are not looked at).
        session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="sekret-key")
        c = leasehold.Client("dynamodb://leasehold_py_test", owner="boto-opts", session=session,
                             region_name=self.region, endpoint_url=self.endpoint,
                             config=botocore.config.Config(user_agent_extra="leasehold-test/1",
                                                           max_pool_connections=3))
        self.addCleanup(c.close)
        self.assertIsInstance(c, leasehold.DynamoDBClient)
        cfg = c._ddb.meta.config  # type: ignore[attr-defined]
        self.assertEqual(cfg.max_pool_connections, 3)  # the caller's Config, merged
        self.assertTrue(cfg.user_agent.endswith(" leasehold-test/1"), cfg.user_agent)
        self.assertEqual(cfg.retries["total_max_attempts"], 1)    # the client's own retries kept
        self.assertEqual(c._ddb.meta.region_name, self.region)  # type: ignore[attr-defined]
        lease = c.try_acquire(uniq("boto-opts"), ttl=30)
        self.assertEqual(c.get(lease.name).owner, "boto-opts")
        lease.release()
        r = repr(c)
        self.assertIn("leasehold_py_test", r)
        self.assertNotIn("sekret", r)

    def test_conflicts_and_bad_values_are_refused(self) -> None:
        base = f"dynamodb://leasehold_py_test?region={self.region}&endpoint={self.endpoint}"
        for kw, field in (({"region_name": "eu-west-3"}, "region_name"),
                          ({"endpoint_url": "http://127.0.0.1:1"}, "endpoint_url"),
                          ({"config": {"read_timeout": 1}}, "config"),
                          ({"boto_client": object(), "config": object()}, "boto_client"),
                          ({"session": "a-session"}, "session"),  # was an AttributeError
                          ({"session": _NotASession()}, "session"),
                          # A client that can send no request: its constructor failed
                          # as unreachable, "the outcome is unknown", after up to 9 s.
                          ({"timeout": 0.05}, "timeout"), ({"timeout": 1e-9}, "timeout")):
            with self.subTest(kw=kw):
                t0 = time.monotonic()
                with self.assertRaises(InvalidError) as cm:
                    leasehold.Client(base, **kw)
                self.assertEqual(cm.exception.field, field)
                self.assertLess(time.monotonic() - t0, 1.0)  # refused before anything is sent
        with self.assertRaises(InvalidError):
            leasehold.Client("dynamodb://leasehold_py_test", region_name="Not A Region", endpoint_url=self.endpoint)
        with self.assertRaises(InvalidError):
            leasehold.Client("dynamodb://leasehold_py_test", region_name=self.region, endpoint_url="ftp://x")


if __name__ == "__main__":
    unittest.main()
