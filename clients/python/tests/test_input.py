"""Bad input of the wrong type is Invalid before any request (red team of
issue 32: names of None, 123 or bytes, and TTLs of NaN or infinity, raised
AttributeError, TypeError, ValueError or OverflowError), and URL schemes are
case-insensitive when the client picks its transport."""

import math
import unittest

import leasehold
from leasehold import Invalid


class InputTypesTest(unittest.TestCase):
    def setUp(self) -> None:
        # Nothing listens on port 9: every check here must fail before a request.
        self.c = leasehold.Client("http://127.0.0.1:9", owner="input-test", timeout=1)
        self.addCleanup(self.c.close)

    def test_names_of_the_wrong_type(self) -> None:
        for bad in [None, 123, b"x", ["a"]]:
            for call in (lambda: self.c.try_acquire(bad, ttl=1),
                         lambda: self.c.acquire(bad, ttl=1, timeout=0),
                         lambda: self.c.get(bad)):
                with self.subTest(name=bad):
                    with self.assertRaises(Invalid) as cm:
                        call()
                    self.assertEqual(cm.exception.field, "name")

    def test_ttls_that_are_not_numbers(self) -> None:
        for bad in [math.nan, math.inf, -math.inf]:
            with self.subTest(ttl=bad):
                with self.assertRaises(Invalid) as cm:
                    self.c.try_acquire("job", ttl=bad)
                self.assertEqual(cm.exception.field, "ttl")

    def test_ttls_that_are_not_numbers_both_clients_say_so(self) -> None:
        # Red team of 2026-12-04, item 13b: DynamoDB said "nans is outside the allowed range [10ms, 24h]".
        # (DynamoDB's client: test_dynamodb.py, test_ttls_that_are_not_numbers.)
        for bad, shown in [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"), (1e400, "inf")]:
            with self.subTest(ttl=bad):
                with self.assertRaises(Invalid) as cm:
                    self.c.try_acquire("job", ttl=bad)
                self.assertEqual(str(cm.exception), f"invalid ttl: {shown} is not a number of seconds")

    def test_dynamodb_keywords_with_a_server_url(self) -> None:
        # Client(url, session=..., ...) is typed for both clients (red team of 2026-12-04,
        # item 6); a server's client refuses them, naming the keyword, before any request.
        import leasehold.aio
        for field in ("boto_client", "session", "region_name", "endpoint_url", "config"):
            for make in (leasehold.Client, leasehold.aio.Client):
                with self.subTest(field=field, client=make.__module__):
                    with self.assertRaises(Invalid) as cm:
                        make("http://127.0.0.1:9", **{field: "x"})  # type: ignore[arg-type]
                    self.assertEqual(cm.exception.field, field)
                    self.assertIn("dynamodb://", str(cm.exception))

    def test_a_timeout_below_the_minimum(self) -> None:
        import leasehold.aio

        for t in (0.05, 0.099, 1e-9):
            for make in (leasehold.Client, leasehold.aio.Client):
                with self.subTest(t=t, client=make.__module__):
                    with self.assertRaises(Invalid) as cm:
                        make("http://127.0.0.1:9", owner="input-test", timeout=t)
                    self.assertEqual(cm.exception.field, "timeout")
                    self.assertIn("minimum of 0.1s", str(cm.exception))
        leasehold.Client("http://127.0.0.1:9", owner="input-test", timeout=0.1).close()

    def test_scheme_case(self) -> None:
        c = leasehold.Client("HTTP://127.0.0.1:9", owner="input-test")
        c.close()
        # A dynamodb URL in capitals is the DynamoDB client too: it is refused
        # for the same reason as the same URL in small letters (here: no
        # table), not as "not an http:// or https:// server address".
        rest = "://?region=us-east-1&endpoint=http://127.0.0.1:9"
        with self.assertRaises(Invalid) as small:
            leasehold.Client("dynamodb" + rest)
        with self.assertRaises(Invalid) as caps:
            leasehold.Client("DYNAMODB" + rest)
        self.assertEqual((caps.exception.field, caps.exception.reason),
                         (small.exception.field, small.exception.reason))
    def test_malformed_urls(self) -> None:
        # urllib's own ValueError ("Invalid IPv6 URL") escaped before.
        for url in ["http://[::1", "https://[fe80::1", "dynamodb://[::1", "dynamodb://tbl:x",
                    "dynamodb://tbl?endpoint=http://[::1", 12]:
            with self.subTest(url=url):
                with self.assertRaises(Invalid) as cm:
                    leasehold.Client(url)
                self.assertIn("url", cm.exception.field.lower())


if __name__ == "__main__":
    unittest.main()
