"""docs/clients.md's contract table against docs/openapi.yaml, and the
client's routes against the table: every route, status, member, header
and query parameter the client relies on must be in the API description."""

from __future__ import annotations

import os
import re
import unittest
from typing import Any, Dict, List, Set

import engines

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CLIENTS_MD = os.path.join(ROOT, "docs", "clients.md")
OPENAPI = os.path.join(ROOT, "docs", "openapi.yaml")
PACKAGE = os.path.join(ROOT, "clients", "python", "leasehold")


def load_openapi() -> Dict[str, Any]:
    try:
        import yaml
    except ImportError:
        engines.missing("PyYAML (apt-get install python3-yaml)")
    with open(OPENAPI, encoding="utf-8") as f:
        return yaml.safe_load(f)


def contract_rows() -> List[Dict[str, Any]]:
    with open(CLIENTS_MD, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- contract:begin -->\n(.*?)<!-- contract:end -->", text, re.S)
    if not m:
        raise AssertionError("docs/clients.md has no contract table")
    rows = []
    for line in m.group(1).strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5:
            raise AssertionError(f"docs/clients.md: a contract row without 5 cells: {line}")
        split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
        rows.append(dict(method=cells[0], path=cells[1], status=cells[2], sends=split(cells[3]), reads=split(cells[4])))
    return rows


class Resolver:
    def __init__(self, doc: Dict[str, Any]) -> None:
        self.doc = doc

    def ref(self, node: Any) -> Any:
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            parts = node["$ref"].lstrip("#/").split("/")
            node = self.doc
            for p in parts:
                node = node[p]
            seen += 1
            if seen > 20:
                raise AssertionError("a $ref loop")
        return node

    def members(self, schema: Any, prefix: str = "", depth: int = 0) -> Set[str]:
        """Every member path a schema declares: a, a.b, a[].b."""
        schema = self.ref(schema)
        out: Set[str] = set()
        if not isinstance(schema, dict) or depth > 6:
            return out
        for sub in schema.get("allOf", []) + schema.get("oneOf", []) + schema.get("anyOf", []):
            out |= self.members(sub, prefix, depth + 1)
        if "items" in schema:
            out |= self.members(schema["items"], prefix + "[]", depth + 1)
        for name, sub in (schema.get("properties") or {}).items():
            path = f"{prefix}.{name}" if prefix else name
            out.add(path)
            out |= self.members(sub, path, depth + 1)
        return out

    def parameters(self, op: Dict[str, Any], path_item: Dict[str, Any], where: str) -> Set[str]:
        out = set()
        for p in (path_item.get("parameters") or []) + (op.get("parameters") or []):
            p = self.ref(p)
            if p.get("in") == where:
                out.add(p["name"].lower())
        return out


class ContractTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.api = load_openapi()
        cls.r = Resolver(cls.api)
        cls.rows = contract_rows()

    def test_rows_exist_in_openapi(self) -> None:
        self.assertGreater(len(self.rows), 20)
        for row in self.rows:
            with self.subTest(row=f"{row['method']} {row['path']} {row['status']}"):
                item = self.api["paths"].get(row["path"])
                self.assertIsNotNone(item, "no such path in openapi.yaml")
                op = item.get(row["method"].lower())
                self.assertIsNotNone(op, "no such method in openapi.yaml")
                # What the client sends.
                body = set()
                rb = self.r.ref(op.get("requestBody") or {})
                js = (rb.get("content") or {}).get("application/json")
                if js:
                    body = self.r.members(js.get("schema"))
                headers = self.r.parameters(op, item, "header")
                query = self.r.parameters(op, item, "query")
                for m in row["sends"]:
                    if m.startswith("header:"):
                        self.assertIn(m[7:].lower(), headers, f"request header {m[7:]} not in openapi.yaml")
                    elif m.startswith("query:"):
                        self.assertIn(m[6:].lower(), query, f"query parameter {m[6:]} not in openapi.yaml")
                    else:
                        self.assertIn(m, body, f"request member {m} not in openapi.yaml")
                # What the client reads.
                resp = self.r.ref((op.get("responses") or {}).get(row["status"]))
                self.assertIsNotNone(resp, f"status {row['status']} not in openapi.yaml")
                members: Set[str] = set()
                for ct, c in (resp.get("content") or {}).items():
                    if "json" in ct:
                        members |= self.r.members(c.get("schema"))
                rheaders = {h.lower() for h in (resp.get("headers") or {})}
                for m in row["reads"]:
                    if m.startswith("header:"):
                        self.assertIn(m[7:].lower(), rheaders, f"answer header {m[7:]} not in openapi.yaml")
                    else:
                        self.assertIn(m, members, f"answer member {m} not in openapi.yaml")

    def test_the_clients_routes_are_in_the_contract(self) -> None:
        documented = {r["path"] for r in self.rows}
        used = set()
        for fn in os.listdir(PACKAGE):
            if not fn.endswith(".py"):
                continue
            with open(os.path.join(PACKAGE, fn), encoding="utf-8") as f:
                src = f.read()
            for m in re.finditer(r'name_path\("(v1/[a-z]+)", [a-z._]+(?:, "([a-z-]+)")?\)', src):
                param = "{key}" if m.group(1) == "v1/records" else "{name}"
                used.add("/" + m.group(1) + "/" + param + (("/" + m.group(2)) if m.group(2) else ""))
            for m in re.finditer(r'"(/v1/[a-z]+)"', src):
                used.add(m.group(1))
        self.assertGreater(len(used), 8)
        self.assertEqual(sorted(used - documented), [], "routes the client uses that docs/clients.md does not list")
        self.assertEqual(sorted(documented - used), [], "routes docs/clients.md lists that the client does not use")

    def test_a_wrong_row_is_caught(self) -> None:
        # The check itself: a member openapi.yaml does not have must fail it.
        op = self.api["paths"]["/v1/leases/{name}/acquire"]["post"]
        body = self.r.members(self.r.ref(op["requestBody"])["content"]["application/json"]["schema"])
        self.assertIn("request_id", body)
        self.assertNotIn("requestId", body)
        txn = self.r.members(self.r.ref(self.api["paths"]["/v1/txn"]["post"]["requestBody"])["content"]["application/json"]["schema"])
        self.assertIn("then[].value_base64", txn)


if __name__ == "__main__":
    unittest.main()
