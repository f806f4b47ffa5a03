"""mypy --strict with the package's own configuration (pyproject.toml) accepts
the package, and catches what the old signatures let through (issue 29, item
13): a typo in a keyword of lease() (it took **kw: Any), redis-py's timeout=
on lock(), DynamoDBClient used as Any. run_tests.sh runs mypy on the package
first; this checks that the check can fail."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

import engines

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))

BAD = '''
import leasehold
import leasehold.aio

c = leasehold.Client("http://127.0.0.1:7070")
with c.lease("jobs/a", ttl=5, tiemout=3) as lease:       # typo: tiemout
    pass
c.lock("jobs/a", timeout=10)                             # redis-py's TTL spelling
n: int = leasehold.DynamoDBClient("dynamodb://t")        # not an int (and not Any)
s: str = c.lock("jobs/a").acquire()                      # a bool, not a str


async def f() -> None:
    a = leasehold.aio.Client("http://127.0.0.1:7070")
    async with a.lease("jobs/a", ttl=5, on_lots=None):  # typo: on_lots
        pass
'''



def readme_dynamodb_example() -> str:
    """The README's example of boto3's names as keywords ("A lease on DynamoDB, no
    server"), as a user's module: mypy --strict must accept it as it runs (issue 29
    red team of 2026-12-04, item 6: session=, region_name=, endpoint_url= and config=
    were each an "Unexpected keyword argument" of Client)."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        blocks = f.read().split("```python\n")[1:]
    found = [b.split("```")[0] for b in blocks if "session=boto3.session.Session(" in b.split("```")[0]]
    assert len(found) == 1, f"README.md: want one example with session=boto3.session.Session(, found {len(found)}"
    return "import leasehold.aio\nfrom leasehold import Client\n" + found[0] + \
        'a = leasehold.aio.Client("dynamodb://leasehold", region_name="us-east-1", endpoint_url="http://127.0.0.1:8000")\n' + \
        'b = leasehold.aio.Client("dynamodb://leasehold", session=boto3.session.Session(), config=botocore.config.Config())\n'


class MypyTest(unittest.TestCase):
    def mypy(self, *args: str) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
        try:
            import mypy  # noqa: F401
        except ImportError:
            engines.missing("mypy (apt-get install python3-mypy)")
        with tempfile.TemporaryDirectory() as cache:
            return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml",
                                   "--cache-dir", cache, *args], cwd=HERE, capture_output=True, text=True,
                                  timeout=600)

    def test_the_package_is_clean_and_mistakes_are_caught(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "uses_leasehold.py")
            with open(bad, "w", encoding="utf-8") as f:
                f.write(BAD)
            good = os.path.join(tmp, "readme_dynamodb.py")
            with open(good, "w", encoding="utf-8") as f:
                f.write(readme_dynamodb_example())
            r = self.mypy("leasehold", bad, good)
        out = r.stdout + r.stderr
        pkg = [line for line in out.splitlines() if line.startswith("leasehold") and ": error:" in line]
        self.assertEqual(pkg, [], out)  # the package itself: no errors
        self.assertEqual([x for x in out.splitlines() if "readme_dynamodb.py" in x], [], out)  # nor the README's example
        for line, what in ((6, '"tiemout"'), (8, '"timeout"'), (9, '"DynamoDBClient"'), (10, '"bool"'),
                           (15, '"on_lots"')):
            with self.subTest(line=line):
                self.assertTrue(any(f"uses_leasehold.py:{line}: error" in x and what in x for x in out.splitlines()),
                                out)
        self.assertEqual(sum(": error:" in x for x in out.splitlines()), 5, out)


if __name__ == "__main__":
    unittest.main()
