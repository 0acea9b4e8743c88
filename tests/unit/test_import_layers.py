"""The import structure: lower layers never import higher ones, the library never imports the application, only
the edge imports Hydra, and no benchmark or library module imports a test. Every import counts, including those
deferred inside functions (they are dependencies all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "mnemis"

# (importer prefix, imported prefix, why it is forbidden)
FORBIDDEN = [
    ("mnemis.index", "mnemis.store", "indexes are built from what a store hands over (mnemis.index.catalog.ItemSource)"),
    ("mnemis.index", "mnemis.ingest", "how an item reads as text lives in mnemis.texts"),
    ("mnemis.index", "mnemis.retrieve", "retrieval uses the indexes, not the reverse"),
    ("mnemis.retrieve", "mnemis.ingest", "reading never depends on the writing stages"),
    ("mnemis.retrieve", "mnemis.eval", "retrieval does not know the evaluation harness"),
    ("mnemis.prompts", "mnemis.eval", "prompts are ground floor (rendering lives in mnemis.render)"),
    ("mnemis.prompts", "mnemis.models", "prompts are plain text and schemas"),
    ("mnemis.prompts", "mnemis.ingest", "prompts are ground floor"),
    ("mnemis.prompts", "mnemis.retrieve", "prompts are ground floor"),
    ("mnemis.store", "mnemis.models", "the store keeps records, it runs no model"),
    ("mnemis.data", "mnemis.models", "loaders run no model"),
    ("mnemis.data", "mnemis.eval", "loaders do not know the evaluation harness"),
    ("mnemis.models", "mnemis.ingest", "the model layer never drives a stage"),
    ("mnemis.models", "mnemis.eval", "the model layer never drives a stage"),
    ("mnemis.models.tiny", "mnemis.models.split_gguf", "packaged models are assembled in mnemis.models.packaged"),
]
EDGE = ("mnemis.app", "mnemis.config")  # the only importers of Hydra / OmegaConf


def _module(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = _module(path).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


GRAPH = {_module(p): imports(p) for p in _files(PACKAGE)}


@pytest.mark.parametrize(("low", "high", "why"), FORBIDDEN)
def test_no_import_climbs_back_up(low, high, why):
    bad = sorted(f"{m} imports {i}" for m, deps in GRAPH.items() if _under(m, low)
                 for i in deps if _under(i, high))
    assert not bad, f"{why}: " + "; ".join(bad)


def test_the_library_never_imports_the_application():
    bad = sorted(f"{m} imports {i}" for m, deps in GRAPH.items() if not _under(m, "mnemis.app")
                 for i in deps if _under(i, "mnemis.app"))
    assert not bad, bad


def test_only_the_edge_imports_hydra():
    bad = sorted(f"{m} imports {i}" for m, deps in GRAPH.items() if not any(_under(m, e) for e in EDGE)
                 for i in deps if i.split(".")[0] in ("hydra", "omegaconf"))
    assert not bad, bad


def test_no_benchmark_or_library_module_imports_a_test():
    files = _files(PACKAGE) + _files(REPO / "experiments")
    bad = []
    for p in files:
        text = p.read_text(encoding="utf-8")
        deps = imports(p)
        if any(i.split(".")[0] == "tests" or i.split(".")[0].startswith("test_") for i in deps) \
                or ('"tests"' in text and "sys.path" in text):
            bad.append(str(p.relative_to(REPO)))
    assert not bad, bad


def test_the_checker_sees_deferred_and_relative_imports(tmp_path):
    pkg = tmp_path / "mnemis" / "index"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("from . import bm25\n\ndef f():\n    from mnemis.store.sqlite import GraphStore\n")
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        assert {"mnemis.index.bm25", "mnemis.store.sqlite.GraphStore"} <= imports(pkg / "x.py")
    finally:
        REPO = saved
