"""Holder proofs through a real leasehold server with auth on: only the client
that acquired a grant (and keeps its secret) renews and releases it; and
``list`` reads every page."""

from __future__ import annotations

import http.client
import json
import os
import tempfile
import unittest
import urllib.parse

from leasehold import BadProof, Client, NotHeld

from server import Server, uniq

SERVER: Server
AUTH_DIR: str


def setUpModule() -> None:
    global SERVER, AUTH_DIR
    AUTH_DIR = tempfile.mkdtemp(prefix="leasehold-py-auth-")
    path = os.path.join(AUTH_DIR, "tokens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"tokens": [
            {"identity": "a", "token": "tok-a", "grants": [{"prefix": "py/", "access": "write"}]},
            {"identity": "b", "token": "tok-b", "grants": [{"prefix": "py/", "access": "write"}]},
        ]}, f)
    SERVER = Server("--auth-file", path)


def tearDownModule() -> None:
    SERVER.stop()
    import shutil
    shutil.rmtree(AUTH_DIR, ignore_errors=True)


class HolderProofTest(unittest.TestCase):
    def setUp(self) -> None:
        self.a = Client(SERVER.url, token="tok-a", owner="owner-a")
        self.b = Client(SERVER.url, token="tok-b", owner="owner-b")

    def test_reprs_show_no_secret(self) -> None:
        # Issue 29, item 13: a __repr__ on Lease and Client, without the bearer
        # token or the grant's holder proof.
        lease = self.a.try_acquire(uniq("repr"), ttl=30)
        self.assertTrue(lease.info.secret)
        for r in (repr(lease), repr(lease.info), repr(self.a)):
            self.assertNotIn(lease.info.secret, r)
            self.assertNotIn("tok-a", r)
        self.assertIn(f"token={lease.token}", repr(lease))
        self.assertIn("held", repr(lease))
        self.assertIn("owner-a", repr(self.a))
        lease.release()
        self.assertIn("released", repr(lease))

    def test_only_the_acquirer_renews_and_releases(self) -> None:
        name = uniq("proof")
        lease = self.a.try_acquire(name, ttl=60)
        self.assertTrue(lease.info.secret)
        self.assertNotIn(lease.info.secret, repr(lease.info))
        seen = self.b.get(name)
        self.assertEqual((seen.owner, seen.token), ("owner-a", lease.token))
        self.assertEqual(seen.secret, "")
        other = self.b.try_acquire(uniq("other"), ttl=60)
        for secret in ("", "wrong", other.info.secret):
            with self.subTest(secret=secret):
                with self.assertRaises(BadProof) as cm:
                    self.b._renew(name, seen.owner, seen.token, 3600, None, secret=secret)
                self.assertIsInstance(cm.exception, NotHeld)
                with self.assertRaises(BadProof):
                    self.b._release(name, seen.owner, seen.token, secret=secret)
        now = self.b.get(name)
        self.assertEqual((now.owner, now.token, now.ttl), ("owner-a", lease.token, 60.0))
        lease.renew()
        lease.release()
        other.release()
        self.assertEqual([x.name for x in self.b.list(name)], [])

    def test_semaphore_permit_and_waited_grant(self) -> None:
        sem = self.a.semaphore(uniq("sem"), 2)
        permit = sem.try_acquire(ttl=60)
        self.assertTrue(permit.info.secret)
        with self.assertRaises(BadProof):
            self.b._release(permit.name, permit.owner, permit.token)
        permit.renew()
        permit.release()
        lease = self.a.acquire(uniq("wait"), ttl=60, timeout=30)
        lease.renew()
        lease.release()


class ListPagesTest(unittest.TestCase):
    def test_list_follows_next(self) -> None:
        prefix = uniq("many") + "/"
        n = 10_000 + 3
        u = urllib.parse.urlsplit(SERVER.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            for i in range(n):
                body = json.dumps({"owner": "o", "ttl_ms": 600000})
                conn.request("POST", f"/v1/leases/{prefix}{i:05d}/acquire", body=body,
                             headers={"Content-Type": "application/json", "Authorization": "Bearer tok-a"})
                r = conn.getresponse()
                r.read()
                self.assertEqual(r.status, 200)
        finally:
            conn.close()
        got = Client(SERVER.url, token="tok-a").list(prefix)
        self.assertEqual([x.name for x in got], [f"{prefix}{i:05d}" for i in range(n)])


if __name__ == "__main__":
    unittest.main()
