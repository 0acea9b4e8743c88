"""The package is a house of floors (docs/architecture.md draws it): a module imports only modules on its own floor
or below, never one above, and no two modules import each other round a circle. Every import counts, including
those deferred inside functions (they are dependencies all the same); an import under ``if TYPE_CHECKING:`` loads
nothing and names a type only, so it does not. Besides: only the edge imports Hydra, nothing in the package
imports its test kit, and no benchmark or library module imports a test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"

# Bottom to top: (floor name, the packages and modules on it). A name covers its submodules; ``mnemis`` alone is
# the package's own ``__init__`` (the library's front door). docs/architecture.md holds the same table.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("mnemis.types", "mnemis.times", "mnemis.texts", "mnemis.render", "mnemis.messages",
                "mnemis.paths", "mnemis.locks", "mnemis.logs", "mnemis.progress", "mnemis.sqlite_file",
                "mnemis.ops", "mnemis.kernels")),
    ("prompts and settings", ("mnemis.prompts", "mnemis.address", "mnemis.settings", "mnemis.model_roles",
                              "mnemis.gpu_plan")),
    ("records and models", ("mnemis.store", "mnemis.index", "mnemis.models")),
    ("data", ("mnemis.data",)),
    ("stages", ("mnemis.ingest", "mnemis.hierarchy", "mnemis.retrieve")),
    ("evaluation", ("mnemis.eval",)),
    ("methods", ("mnemis.method", "mnemis.baselines")),
    ("library front", ("mnemis", "mnemis.memory", "mnemis.memory_method", "mnemis.components", "mnemis.roles",
                       "mnemis.config")),
    ("scale-out", ("mnemis.scale",)),
    ("application", ("mnemis.app",)),
    ("test kit", ("mnemis.testing",)),
]

# Imports that still climb, each with the move that takes it away; an entry no longer found fails the test, so
# the list only shrinks.
PENDING: dict[tuple[str, str], str] = {}
EDGE = ("mnemis.app", "mnemis.config")  # the only importers of Hydra / OmegaConf
TESTING = "mnemis.testing"


def _module(path: Path, root: Path) -> str:
    """Dotted name of a source file; ``kernels/`` is installed as ``mnemis.kernels`` (pyproject's package-dir)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] == "kernels":
        parts = ["mnemis", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _type_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(path: Path, root: Path, known: set[str]) -> set[str]:
    """Every module of ``known`` that ``path`` imports, anywhere in the file (relative imports resolved,
    ``from package import module`` taken as the module), except under ``if TYPE_CHECKING:``; an imported name
    that is no module counts as its module. Names outside ``known`` (the standard library, other packages) are
    kept as written."""
    me = _module(path, root).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    found: set[str] = set()

    def module_of(name: str) -> str:
        probe = name
        while probe and probe not in known:
            probe = probe.rpartition(".")[0]
        return probe or name

    def visit(node: ast.AST) -> None:
        if _type_only(node):
            for child in node.orelse:  # type: ignore[attr-defined]
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(module_of(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.add(full if full in known else module_of(base))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return found


def _sources(root: Path) -> list[Path]:
    return _files(root / "mnemis") + _files(root / "kernels")


def graph(root: Path = REPO) -> dict[str, set[str]]:
    files = _sources(root)
    known = {_module(p, root) for p in files}
    return {_module(p, root): imports(p, root, known) for p in files}


def floor_of(module: str) -> int | None:
    """Index in FLOORS of the floor holding ``module`` (the longest name that covers it), or None."""
    best, where = -1, None
    for i, (_name, members) in enumerate(FLOORS):
        for m in members:
            covers = module == m if m == "mnemis" else (module == m or module.startswith(m + "."))
            if covers and len(m) > best:
                best, where = len(m), i
    return where


GRAPH = graph()


def _climbs(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    out = []
    for m, deps in g.items():
        for d in deps:
            if d in g and floor_of(d) is not None and floor_of(m) is not None and floor_of(d) > floor_of(m):
                out.append((m, d))
    return sorted(out)


def test_every_module_stands_on_a_floor():
    homeless = sorted(m for m in GRAPH if floor_of(m) is None)
    assert not homeless, f"add these to a floor in FLOORS and docs/architecture.md: {homeless}"


def test_no_import_goes_up_a_floor():
    climbs = _climbs(GRAPH)
    bad = [f"{m} (floor {FLOORS[floor_of(m)][0]}) imports {d} (floor {FLOORS[floor_of(d)][0]})"
           for m, d in climbs if (m, d) not in PENDING]
    assert not bad, "\n".join(bad)
    stale = sorted(set(PENDING) - set(climbs))
    assert not stale, f"no longer climbs, take it off PENDING: {stale}"


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            ring = []
            while True:
                w = stack.pop()
                on.discard(w)
                ring.append(w)
                if w == v:
                    break
            if len(ring) > 1:
                out.append(sorted(ring))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_two_modules_import_each_other_round_a_circle():
    assert not _cycles(GRAPH), _cycles(GRAPH)


def _doc_floors() -> list[tuple[str, tuple[str, ...]]]:
    """The floor table of docs/architecture.md (rows ``| n | name | `a`, `b` | ... |``), bottom to top."""
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|([^|]*)\|", line)
        if m:
            rows.append((int(m.group(1)), m.group(2), tuple(re.findall(r"`([\w.]+)`", m.group(3)))))
    return [(name, members) for _n, name, members in sorted(rows)]


def test_the_architecture_page_draws_the_same_floors():
    assert _doc_floors() == FLOORS, "docs/architecture.md's floor table and FLOORS here must list the same floors"


def test_only_the_edge_imports_hydra():
    bad = sorted(f"{m} imports {i}" for m, deps in GRAPH.items() if not any(m == e or m.startswith(e + ".")
                                                                            for e in EDGE)
                 for i in deps if i.split(".")[0] in ("hydra", "omegaconf"))
    assert not bad, bad


def test_nothing_in_the_package_imports_the_test_kit():
    bad = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if not m.startswith(TESTING)
                 for d in deps if d == TESTING or d.startswith(TESTING + "."))
    assert not bad, bad


def test_no_benchmark_or_library_module_imports_a_test():
    files = _sources(REPO) + _files(REPO / "experiments")
    bad = []
    for p in files:
        text = p.read_text(encoding="utf-8")
        deps = imports(p, REPO, set())
        if any(i.split(".")[0] == "tests" or i.split(".")[0].startswith("test_") for i in deps) \
                or ('"tests"' in text and "sys.path" in text):
            bad.append(str(p.relative_to(REPO)))
    assert not bad, bad


def test_no_benchmark_imports_another_by_path():
    """What benchmarks share lives in mnemis.testing, imported like any module: no benchmark imports another one
    (by a sys.path entry or by file location)."""
    files = _files(REPO / "experiments")
    benches = {p.stem for p in files}
    bad = []
    for p in files:
        deps = imports(p, REPO, set())
        if any(d.split(".")[0] in benches - {p.stem} for d in deps) or "spec_from_file_location" in p.read_text():
            bad.append(str(p.relative_to(REPO)))
    assert not bad, bad


def test_the_checker_sees_deferred_relative_and_climbing_imports(tmp_path):
    pkg = tmp_path / "mnemis" / "index"
    pkg.mkdir(parents=True)
    for name in ("__init__.py", "bm25.py", "../__init__.py", "../progress.py"):
        (pkg / name).write_text("")
    (tmp_path / "mnemis" / "app").mkdir()
    (tmp_path / "mnemis" / "app" / "__init__.py").write_text("")
    (pkg / "x.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import bm25\nfrom mnemis import progress\n"
        "if TYPE_CHECKING:\n    from mnemis.app import cli\n\n"
        "def f():\n    from mnemis.app import jobs\n    import mnemis.index.bm25\n")
    g = graph(tmp_path)
    assert g["mnemis.index.x"] == {"typing", "mnemis.index.bm25", "mnemis.progress", "mnemis.app"}
    assert _climbs(g) == [("mnemis.index.x", "mnemis.app")]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", ["mnemis", "mnemis.memory", "mnemis.app.cli", "mnemis.kernels.grouped_topk",
                                    "mnemis.models.llm.client"])
def test_floor_lookup_takes_the_longest_name(module):
    assert floor_of(module) is not None
    assert floor_of("mnemis.nonexistent") is None
