"""The package's layering, read from the imports of every module (module-level and inside functions).

- readers depend only downward: on the bottom layer (errors, checks, limits, redact) and on
  ``lastgood.readers`` itself — never on the core (the conformance kit, which drives a reader through
  the core as Lastgood uses it, is the one exception);
- the core names no store format: of ``lastgood.readers`` it imports only the contract (base), the
  registry, the recovery journal and the shared helpers (common, tensors);
- no import cycles between modules;
- a reader's name appears as a string in the registry only.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"app": "lastgood", "readers": "lastgood.readers", "pages": "lastgood.pages"}
BOTTOM = {"lastgood.errors", "lastgood.checks", "lastgood.limits", "lastgood.redact", "lastgood.records"}
CORE_MAY_USE = ("lastgood.readers.base", "lastgood.readers.registry", "lastgood.readers.journal",
                "lastgood.readers.common", "lastgood.readers.tensors")
KIT = "lastgood.readers.testing"
# a format's writer API re-exported at the top of the package (``from lastgood.langgraph import LastgoodSaver``):
# what an agent imports, not the console's core
FACADES = {"lastgood.langgraph"}


def module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([FOLDERS[folder], *parts])


@cache
def modules() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            found[module_name(path)] = path
    return found


def resolve(importer: str, node: ast.ImportFrom) -> list[str]:
    """``from X import Y`` is an import of ``X.Y`` when that is a module, else of ``X``."""
    base = node.module or ""
    if node.level:
        package = importer.split(".")[: -node.level] if not modules()[importer].name == "__init__.py" \
            else importer.split(".")[: len(importer.split(".")) - node.level + 1]
        base = ".".join([*package, *([base] if base else [])])
    names = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        names.append(candidate if candidate in modules() else base)
    return names


@cache
def imports(module: str) -> frozenset[str]:
    """Every import the module makes when it runs (at its top or inside functions); imports under
    ``if TYPE_CHECKING:`` are for annotations only and never run."""
    tree = ast.parse(modules()[module].read_text(), filename=str(modules()[module]))
    typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block) for n in ast.walk(block)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(resolve(module, node))
    return frozenset(n for n in found if n.startswith("lastgood"))


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def known(name: str) -> str | None:
    """The module ``name`` is, or the package it is in (``lastgood.x.y`` of a name inside a module)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def test_the_import_reader_sees_from_lastgood_import_x_as_an_import_of_lastgood_x() -> None:
    assert "lastgood.index.queries" in imports("lastgood.stores") or any(
        n.startswith("lastgood.index") for n in imports("lastgood.stores"))
    tree = ast.parse("from lastgood import limits\nfrom lastgood.readers import journal as jr\n")
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert [resolve("lastgood.stores", n) for n in nodes] == [["lastgood.limits"], ["lastgood.readers.journal"]]


def test_readers_depend_only_downward() -> None:
    offenders = []
    for module in modules():
        if not module.startswith("lastgood.readers") or module.startswith(KIT):
            continue
        for name in imports(module):
            if not name.startswith("lastgood.readers") and known(name) not in BOTTOM | {"lastgood"}:
                offenders.append(f"{module} imports {name}")
    assert offenders == []


def test_the_core_names_no_store_format() -> None:
    offenders = []
    for module in modules():
        if module.startswith(("lastgood.readers", "lastgood.pages")) or module in FACADES:
            continue
        for name in imports(module):
            if name.startswith("lastgood.readers.") and not name.startswith(CORE_MAY_USE):
                offenders.append(f"{module} imports {name}")
    assert offenders == []


def test_no_import_cycles() -> None:
    graph = {m: {known(n) for n in imports(m)} - {None, m} for m in modules()}
    # a package's __init__ is imported with each of its modules: only its own imports count
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = [0]

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_a_reader_is_named_in_the_registry_only() -> None:
    from lastgood.readers.registry import BUILTIN

    names = "|".join(re.escape(n) for n in BUILTIN)
    literal = re.compile(rf"""["']({names})["']""")
    offenders = [f"{m}: {hit.group(0)}" for m, path in modules().items()
                 if not m.startswith("lastgood.readers")
                 for hit in literal.finditer(path.read_text())]
    assert offenders == []


def test_pages_use_only_the_ui_layer() -> None:
    offenders = []
    for module in modules():
        if module.startswith("lastgood.pages."):
            source = modules()[module].read_text()
            if re.search(r"^\s*(import|from)\s+(duckdb|fsspec|sqlite3|psycopg|pyarrow)\b", source, re.M):
                offenders.append(f"{module}: storage or database import")
            offenders += [f"{module} imports {n}" for n in imports(module)
                          if not n.startswith("lastgood.ui")]
    assert offenders == []
