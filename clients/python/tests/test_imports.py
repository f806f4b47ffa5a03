"""The package's modules import each other one way (no circle), and the two
transports, client.py (the server over HTTP) and dynamodb.py (DynamoDB
directly), stand side by side: neither reaches the other through its
imports. Imports are read with ``ast``, wherever they are in a module
(top level, inside a function, under ``if TYPE_CHECKING``): an import made
late is still a dependency.

Run directly, it prints the graph: python3 tests/test_imports.py
"""

import ast
import os
import unittest
from typing import Dict, List, Optional, Set

PACKAGE = "leasehold"
PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, PACKAGE)


def modules() -> List[str]:
    """The package's modules by name; ``__init__`` is the package itself."""
    return sorted(f[:-3] for f in os.listdir(PACKAGE_DIR) if f.endswith(".py"))


def imports_of(module: str, known: Set[str]) -> Set[str]:
    """The package's modules that ``module`` imports, anywhere in its source."""
    with open(os.path.join(PACKAGE_DIR, module + ".py"), encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=module + ".py")
    out: Set[str] = set()

    def add(dotted: str, names: List[str]) -> None:
        # dotted is relative to the package ("" for the package itself).
        head = dotted.split(".")[0]
        if head:
            out.add(head if head in known else "__init__")
            return
        for n in names:  # from . import a, b: a submodule, or a name of __init__
            out.add(n if n in known else "__init__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level == 1:
                add(node.module or "", names)
            elif node.level == 0 and node.module and (node.module + ".").startswith(PACKAGE + "."):
                add(node.module[len(PACKAGE) + 1:], names)
            elif node.level > 1:
                raise AssertionError(f"{module}.py: an import from outside the package: level {node.level}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if (a.name + ".").startswith(PACKAGE + "."):
                    add(a.name[len(PACKAGE) + 1:], [])
    out.discard(module)
    return out


def graph() -> Dict[str, Set[str]]:
    known = set(modules())
    return {m: imports_of(m, known) for m in sorted(known)}


def find_cycle(g: Dict[str, Set[str]]) -> Optional[List[str]]:
    """A circle of imports (its modules, the first repeated at the end), or None."""
    state: Dict[str, int] = {}  # 1: on the path, 2: done
    path: List[str] = []

    def visit(m: str) -> Optional[List[str]]:
        state[m] = 1
        path.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                c = visit(n)
                if c:
                    return c
        path.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state:
            c = visit(m)
            if c:
                return c
    return None


def reach(g: Dict[str, Set[str]], start: str) -> Set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen: Set[str] = set()
    todo = list(g[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(g[m])
    return seen


def render(g: Dict[str, Set[str]]) -> str:
    return "\n".join(f"{m} -> {', '.join(sorted(d)) or '(none)'}" for m, d in g.items())


class ImportGraphTest(unittest.TestCase):
    def test_acyclic(self) -> None:
        g = graph()
        cycle = find_cycle(g)
        self.assertIsNone(cycle, f"import circle: {' -> '.join(cycle or [])}\n{render(g)}")

    def test_transports_side_by_side(self) -> None:
        g = graph()
        for a, b in (("client", "dynamodb"), ("dynamodb", "client")):
            self.assertNotIn(b, reach(g, a), f"{a}.py reaches {b}.py through its imports\n{render(g)}")

    def test_only_the_package_imports_the_transports(self) -> None:
        # The lower modules (core, lease, records, the DynamoDB recipes, ...) know neither transport.
        g = graph()
        for m, deps in g.items():
            if m in ("__init__", "client", "dynamodb"):
                continue
            self.assertFalse(deps & {"client", "dynamodb"}, f"{m}.py imports a transport\n{render(g)}")


if __name__ == "__main__":
    g = graph()
    print(render(g))
    cycle = find_cycle(g)
    print("acyclic" if cycle is None else "circle: " + " -> ".join(cycle))
