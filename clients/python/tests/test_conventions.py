"""Python's conventions in the client (issue 29, item 13): exception names,
reprs, input errors, typing, the package's metadata. Nothing here needs a
server unless it says so."""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import leasehold
import leasehold.aio
from leasehold import errors

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))


class ErrorNamesTest(unittest.TestCase):
    def test_every_exception_is_named_error_and_the_old_names_are_the_same_classes(self) -> None:
        exported = {n: getattr(leasehold, n) for n in leasehold.__all__ if n != "DynamoDBClient"}
        classes = {n: c for n, c in exported.items() if inspect.isclass(c) and issubclass(c, BaseException)}
        self.assertGreater(len(classes), 30)
        for n, c in classes.items():
            with self.subTest(name=n):
                self.assertTrue(issubclass(c, leasehold.LeaseholdError))
                self.assertTrue(c.__name__.endswith("Error"), c.__name__)
                if not n.endswith("Error"):  # an old name: the same class as the new one
                    self.assertIs(c, getattr(leasehold, n + "Error"))
        self.assertEqual(len(errors.ALIASES), 16)

    def test_old_names_catch_what_is_raised(self) -> None:
        c = leasehold.Client("http://127.0.0.1:9", owner="conventions", timeout=1)
        with self.assertRaises(leasehold.Invalid) as cm:  # the old name
            c.try_acquire("job", ttl=float("nan"))
        self.assertIs(type(cm.exception), leasehold.InvalidError)
        self.assertEqual(type(cm.exception).__name__, "InvalidError")
        with self.assertRaises(leasehold.RetriesExhausted):
            raise leasehold.RetriesExhaustedError(leasehold.ConflictError("k", 1, 2), 3)


if __name__ == "__main__":
    unittest.main()


class ReprTest(unittest.TestCase):
    def test_client_repr_shows_no_token_nor_password(self) -> None:
        c = leasehold.Client("http://user:pa55word@127.0.0.1:9", token="s3cr3t-token", owner="repr-owner")
        r = repr(c)
        self.assertTrue(r.startswith("<leasehold.Client 'http://127.0.0.1:9'"), r)
        self.assertIn("repr-owner", r)
        for secret in ("s3cr3t-token", "pa55word", "user"):
            self.assertNotIn(secret, r)
        a = leasehold.aio.Client("http://user:pa55word@127.0.0.1:9", token="s3cr3t-token", owner="repr-owner")
        self.assertNotIn("s3cr3t", repr(a))
        self.assertNotIn("pa55word", repr(a))


class OwnErrorsTest(unittest.TestCase):
    """Bad numbers and ports raise the client's InvalidError (a ValueError), never a bare ValueError."""

    def invalid(self, field: str, call) -> None:  # type: ignore[no-untyped-def]
        with self.assertRaises(leasehold.InvalidError) as cm:
            call()
        self.assertIs(type(cm.exception), leasehold.InvalidError)
        self.assertEqual(cm.exception.field, field)

    def test_bad_ports(self) -> None:
        for url in ("http://127.0.0.1:99999", "http://127.0.0.1:x", "https://127.0.0.1:0", "http://[::1]:70000"):
            with self.subTest(url=url):
                self.invalid("url", lambda: leasehold.Client(url))
                self.invalid("url", lambda: leasehold.aio.Client(url))
        self.invalid("dynamodb URL", lambda: leasehold.aio.Client(
            "dynamodb://table?region=us-east-1&endpoint=http://127.0.0.1:99999"))

    def test_nan_and_infinite_numbers(self) -> None:
        c = leasehold.Client("http://127.0.0.1:9", owner="nan", timeout=1)
        for bad in (math.nan, math.inf, -math.inf):
            with self.subTest(value=bad):
                self.invalid("ttl", lambda: c.try_acquire("job", ttl=bad))
                self.invalid("ttl", lambda: c.acquire("job", ttl=bad, timeout=1))
                self.invalid("ttl", lambda: c.lock("job", ttl=bad))
                self.invalid("blocking_timeout", lambda: c.lock("job", blocking_timeout=bad))
                self.invalid("timeout", lambda: c.lock("job").acquire(timeout=bad))
                self.invalid("timeout", lambda: leasehold.Client("http://127.0.0.1:9", timeout=bad))
                self.invalid("eps", lambda: leasehold.Client("http://127.0.0.1:9", eps=bad))
                self.invalid("rho", lambda: leasehold.Client("http://127.0.0.1:9", rho=bad))
                self.invalid("ttl", lambda: asyncio.run(leasehold.aio.Client("http://127.0.0.1:9").try_acquire("j", bad)))
        self.invalid("timeout", lambda: c.acquire("job", ttl=1, timeout=math.nan))


class WriteDocTest(unittest.TestCase):
    def test_the_docstring_names_the_real_factories(self) -> None:
        doc = leasehold.Write.__doc__ or ""
        named = re.findall(r"``Write\.(\w+)\(", doc)
        self.assertEqual(sorted(named), ["add_to", "put", "remove"])
        for n in named:
            self.assertTrue(callable(getattr(leasehold.Write, n)), n)
        w = leasehold.Write.add_to("k", 2)
        self.assertEqual(w.to_json(), {"key": "k", "add": 2})


class PackageMetadataTest(unittest.TestCase):
    def test_pyproject(self) -> None:
        try:
            import tomllib
        except ImportError:
            self.skipTest("tomllib needs Python 3.11")
        with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
            meta = tomllib.load(f)
        project = meta["project"]
        self.assertNotIn("version", project)  # one source: leasehold.__version__
        self.assertIn("version", project["dynamic"])
        self.assertEqual(meta["tool"]["setuptools"]["dynamic"]["version"], {"attr": "leasehold.__version__"})
        self.assertIn("Typing :: Typed", project["classifiers"])
        self.assertIn("leasehold.aio", meta["tool"]["setuptools"]["packages"])
        self.assertTrue(meta["tool"]["mypy"]["strict"])

    def test_built_metadata(self) -> None:
        # What setuptools makes of it (in a copy: it writes an egg-info beside the package).
        try:
            import setuptools  # noqa: F401
        except ImportError:
            self.skipTest("no setuptools")
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(HERE, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.egg-info", ".mypy_cache"))
            out = os.path.join(tmp, "meta")
            os.mkdir(out)
            code = ("import sys, setuptools.build_meta as b; "
                    "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))")
            r = subprocess.run([sys.executable, "-c", code, out], cwd=src, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            with open(os.path.join(out, r.stdout.strip().splitlines()[-1], "METADATA"), encoding="utf-8") as f:
                text = f.read()
        self.assertIn(f"Version: {leasehold.__version__}\n", text)
        self.assertIn("Classifier: Typing :: Typed\n", text)
        self.assertIn("Requires-Python: >=3.9\n", text)
