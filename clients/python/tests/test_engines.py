"""tests/engines.py decides as the Go tests do whether a missing engine
fails (CI) or skips (a developer's machine). Found by an outside review:
CI=true and LEASEHOLD_REQUIRE_ENGINES=true let the DynamoDB tests skip
where the Go tests fail."""

from __future__ import annotations

import os
import unittest
from unittest import mock

import engines


class RequiredTest(unittest.TestCase):
    def check(self, env, want):
        with mock.patch.dict(os.environ, env, clear=True):
            self.assertEqual(engines.required()[0], want, env)

    def test_values(self):
        self.check({}, False)
        self.check({"CI": "true"}, True)
        self.check({"CI": "1"}, True)
        self.check({"CI": "false"}, False)
        self.check({"CI": "yes"}, False)  # not a boolean to Go either: ignored
        self.check({"LEASEHOLD_REQUIRE_ENGINES": "1"}, True)
        self.check({"LEASEHOLD_REQUIRE_ENGINES": "true"}, True)
        self.check({"LEASEHOLD_REQUIRE_ENGINES": "TRUE"}, True)
        self.check({"LEASEHOLD_REQUIRE_ENGINES": "0", "CI": "true"}, False)
        self.check({"LEASEHOLD_REQUIRE_ENGINES": "", "CI": "true"}, True)

    def test_bad_value(self):
        with mock.patch.dict(os.environ, {"LEASEHOLD_REQUIRE_ENGINES": "yes"}, clear=True):
            with self.assertRaisesRegex(RuntimeError, "not a boolean"):
                engines.required()

    def test_missing(self):
        with mock.patch.dict(os.environ, {"CI": "true"}, clear=True):
            with self.assertRaisesRegex(RuntimeError, r"missing dynalite \(CI=true\)"):
                engines.missing("dynalite")
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(unittest.SkipTest):
                engines.missing("dynalite")


if __name__ == "__main__":
    unittest.main()
