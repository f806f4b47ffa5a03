"""A replica of a DynamoDB global table is refused, as the Go store refuses it.

dynalite has no global tables: a proxy in front of it adds to its real
DescribeTable answers the fields by which DynamoDB describes a replica.
"""

from __future__ import annotations

import http.client
import http.server
import json
import threading
import urllib.parse
import zlib
from typing import Any, Dict

import unittest

import leasehold
from leasehold import UnsupportedError

from test_dynamodb import table_url


class _Front(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, extra: Dict[str, Any]) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.extra = extra
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Front

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        up = self.server.upstream
        conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port or 80, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        conn.request("POST", self.path, body=body, headers=headers)
        resp = conn.getresponse()
        out = resp.read()
        if resp.status == 200 and self.headers.get("X-Amz-Target") == "DynamoDB_20120810.DescribeTable":
            doc = json.loads(out)
            doc["Table"].update(self.server.extra)
            out = json.dumps(doc).encode()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "x-amz-crc32", "connection", "transfer-encoding", "date", "server"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Amz-Crc32", str(zlib.crc32(out)))
        self.end_headers()
        self.wfile.write(out)
        conn.close()


class GlobalTableTest(unittest.TestCase):
    def front(self, extra: Dict[str, Any]) -> str:
        url = table_url("leasehold_py_global")
        leasehold.DynamoDBClient(url).close()  # the table, on dynalite
        u = urllib.parse.urlsplit(url)
        q = dict(urllib.parse.parse_qsl(u.query))
        srv = _Front(q["endpoint"], extra)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        q["endpoint"] = f"http://127.0.0.1:{srv.server_address[1]}"
        return urllib.parse.urlunsplit((u.scheme, u.netloc, "", urllib.parse.urlencode(q), ""))

    def test_replica_refused_unless_one_write_region(self) -> None:
        cases = [
            ({"GlobalTableVersion": "2019.11.21",
              "Replicas": [{"RegionName": "eu-west-1", "ReplicaStatus": "ACTIVE"}]}, "eu-west-1"),
            ({"GlobalTableVersion": "2017.11.29"}, "global table version 2017.11.29"),
            # Issue 31 red team, DynamoDB item 4: names escaped, at most 5 named.
            ({"GlobalTableVersion": "2019.11.21",
              "Replicas": [{"RegionName": "eu\x1b[31mred\nline", "ReplicaStatus": "ACTIVE"}]},
             "replicas in eu\\x1B[31mred\\nline."),
            ({"GlobalTableVersion": "2019.11.21",
              "Replicas": [{"RegionName": f"r{i}", "ReplicaStatus": "ACTIVE"} for i in range(2000)]},
             "replicas in r0, r1, r2, r3, r4 and 1995 more."),
        ]
        for extra, names in cases:
            with self.subTest(extra=str(extra)[:80]):
                url = self.front(extra)
                for u in (url, url + "&create=false"):
                    with self.assertRaises(UnsupportedError) as cm:
                        leasehold.DynamoDBClient(u)
                    msg = str(cm.exception)
                    for want in (names, "last writer wins", "one_write_region=true"):
                        self.assertIn(want, msg)
                    for bad in ("\x1b", "\n", "r5,"):
                        self.assertNotIn(bad, msg)
                    self.assertLess(len(msg), 1000)
                c = leasehold.DynamoDBClient(url + "&one_write_region=true")
                c.close()

    def test_strong_consistency_refused(self) -> None:
        """Issue 31 red team, DynamoDB item 3: a table of multi-Region strong
        consistency is refused with its own reason, with one_write_region=true
        too, in the words of the Go store."""
        url = self.front({"GlobalTableVersion": "2019.11.21", "MultiRegionConsistency": "STRONG",
                          "Replicas": [{"RegionName": "us-east-2", "ReplicaStatus": "ACTIVE"}]})
        for u in (url, url + "&one_write_region=true"):
            with self.assertRaises(UnsupportedError) as cm:
                leasehold.DynamoDBClient(u)
            msg = str(cm.exception)
            self.assertIn('"leasehold_py_global" has replicas in us-east-2, consistency STRONG. Tables of '
                          "multi-Region strong consistency are not supported, with or without "
                          "one_write_region=true", msg)
            self.assertNotIn("last writer wins", msg)

    def test_message_matches_go(self) -> None:
        """The refusal of an eventual global table says what the Go store says
        (Go adds its option's name, WithOneWriteRegion)."""
        url = self.front({"GlobalTableVersion": "2019.11.21", "MultiRegionConsistency": "EVENTUAL",
                          "Replicas": [{"RegionName": "eu-west-1", "ReplicaStatus": "ACTIVE"}]})
        with self.assertRaises(UnsupportedError) as cm:
            leasehold.DynamoDBClient(url)
        self.assertEqual(str(cm.exception),
                         'dynamodb: the table is replicated to other regions (a global table): "leasehold_py_global" '
                         "has replicas in eu-west-1, consistency EVENTUAL. Writes made in two regions at once are "
                         "settled by last writer wins, so two processes could each be granted the same lease in "
                         "their own region. Send every lease and record request for this table to one region and "
                         "open it with one_write_region=true, or use a table that is not replicated")

    def test_plain_table_opens(self) -> None:
        leasehold.DynamoDBClient(table_url("leasehold_py_global")).close()

    def test_bad_value(self) -> None:
        with self.assertRaises(leasehold.InvalidError):
            leasehold.DynamoDBClient(table_url("leasehold_py_global") + "&one_write_region=perhaps")


if __name__ == "__main__":
    unittest.main()
