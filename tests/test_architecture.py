"""The layout holds: the pure folders load no I/O module, and no import cycle exists anywhere in bot/.

The layers themselves (each folder imports only the folders below it, the adapters independent of
each other, the sandbox apart) are import-linter's contracts in pyproject.toml, run by `make check`.
These two are what import-linter cannot see: what a fresh interpreter actually loads (a pure module
can reach an I/O library through a third-party one), and cycles hidden in function-level imports.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bot"
PURE_FOLDERS = ("core", "render")
IO_MODULES = (
    "subprocess",
    "socket",
    "asyncio",
    "httpx",
    "sqlalchemy",
    "gidgethub",
    "starlette",
    "anyio",
    "sqlmodel",
    "uvicorn",
    "psycopg",
    "alembic",
    "celery",
    "multiprocessing",
    "selectors",
    "prometheus_client",
)
# The standard library's package-metadata reader, which pydantic imports to look for plugins, loads
# `email.utils`, which imports `socket` (for getfqdn) and through it `selectors`; nothing is opened.
ALLOWED_VIA = "importlib.metadata"
_LOAD_PURE_FOLDERS = """
import importlib, json, pkgutil, sys
import bot.core, bot.render
names = []
for package in (bot.core, bot.render):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
        names.append(info.name)
print(json.dumps(names))
"""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py") if "sample" not in path.parts}


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module of bot that `path` imports, at any depth of the file (function-level included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != name:
                yield target


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a cycle or several."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def import_chains(importtime_report: str) -> dict[str, list[str]]:
    """Each module `python -X importtime` loaded, with the modules whose import loaded it (outermost first)."""
    chains: dict[str, list[str]] = {}
    rows = [line.split("|")[2] for line in importtime_report.splitlines() if line.startswith("import time:")][1:]
    # A module is printed after everything it imported, indented one step less than they are.
    pending: list[tuple[int, str, list[str]]] = []  # (depth, module, every module its import loaded)
    for row in rows:
        depth, name = (len(row) - len(row.lstrip())) // 2, row.strip()
        below = [entry for entry in pending if entry[0] > depth]
        pending = [entry for entry in pending if entry[0] <= depth]
        loaded = [module for _, child, grandchildren in below for module in (child, *grandchildren)]
        for module in loaded:
            chains[module].insert(0, name)
        chains[name] = []
        pending.append((depth, name, loaded))
    return chains


def test_the_pure_folders_load_no_io_module_in_a_fresh_interpreter():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _LOAD_PURE_FOLDERS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(json.loads(result.stdout)) >= 10  # the walk found the folders' modules
    chains = import_chains(result.stderr)
    loaded_io = {name: chain for name, chain in chains.items() if name.partition(".")[0] in IO_MODULES}
    assert {name: chain for name, chain in loaded_io.items() if ALLOWED_VIA not in chain} == {}


def test_the_import_chains_name_who_loaded_a_module():
    report = "\n".join(
        f"import time: 1 | 1 | {row}"
        for row in (
            "header",
            "      socket",
            "    email.utils",
            "  importlib.metadata",
            "bot.core.workflow",
            "bot.core.text",
        )
    )
    chains = import_chains(report)
    assert chains["socket"] == ["bot.core.workflow", "importlib.metadata", "email.utils"]
    assert chains["bot.core.text"] == []


def test_no_module_of_bot_is_in_an_import_cycle_function_level_imports_included():
    known = modules()
    graph = {name: set(imported_modules(name, path, known)) for name, path in known.items()}
    assert graph["bot.runner.jobs"], "the walk found no imports at all"
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_made_by_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
