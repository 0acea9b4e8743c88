"""Guards of the test suite itself: missing data fails in CI, the run order keeps the shared vLLM engine
away from the unit tests, and ``tests/`` is a package whose shared code lives in ``tests/helpers/`` (no test
module imports another, no helper is imported by a bare name)."""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.run_order import last_engine_user, sort_items


def test_missing_data_skips_locally_and_fails_in_ci(require_data, monkeypatch, tmp_path):
    missing = tmp_path / "locomo10.json"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="locomo10.json"):
        require_data(missing, "LoCoMo")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_data(missing, "LoCoMo")
    missing.write_text("[]")
    assert require_data(missing, "LoCoMo") == missing


@dataclass
class Item:
    nodeid: str
    keywords: set = field(default_factory=set)
    fixturenames: tuple = ()


def test_unit_first_engine_users_together_own_vllm_last():
    items = [
        Item("integration/test_a.py::server", {"integration", "vllm"}, ("vllm_server",)),
        Item("integration/test_a.py::engine1", {"integration", "vllm"}, ("backend", "vllm_backend")),
        Item("integration/test_a.py::hf", {"integration"}, ("hf_backend",)),
        Item("integration/test_b.py::engine2", {"integration", "vllm"}, ("vllm_backend",)),
        Item("integration/test_c.py::job", {"integration", "vllm"}),
        Item("unit/test_x.py::one"),
        Item("unit/test_y.py::two"),
    ]
    sort_items(items)
    assert [it.nodeid.split("::")[1] for it in items] == ["one", "two", "hf", "engine1", "engine2", "server", "job"]
    assert last_engine_user(items) == "integration/test_b.py::engine2"
    assert last_engine_user(items[:3]) is None



TESTS = Path(__file__).resolve().parents[1]
# a subprocess script that imports a test module, or a path part naming one (``... / "unit" / "test_x.py"``)
_IMPORTS_A_TEST = re.compile(r"^\s*(?:from|import)\s+(?:test_\w+|conftest)\b|^(?:test_\w+|conftest)\.py$",
                             re.MULTILINE)


def _sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if not {"__pycache__", "fixtures"} & set(p.parts))


def test_tests_is_a_package_and_shared_code_lives_in_helpers():
    folders = {p.parent for p in _sources()}
    missing = sorted(str(d.relative_to(TESTS.parent)) for d in folders if not (d / "__init__.py").exists())
    assert not missing, f"folders without __init__.py: {missing}"
    stray = sorted(str(p.relative_to(TESTS.parent)) for p in _sources() if p.parent != TESTS / "helpers"
                   and not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py"))
    assert not stray, f"shared test code belongs in tests/helpers/: {stray}"


def _local_module(name: str, local_names: set[str]) -> bool:
    """``name`` is a top-level import of a file under tests/ (a helper imported by a bare name)."""
    if name not in local_names:
        return False
    spec = importlib.util.find_spec(name)
    return spec is None or (spec.origin is not None and Path(spec.origin).is_relative_to(TESTS))


def bad_imports(text: str, path: Path, local_names: set[str]) -> list[str]:
    """Imports in ``text`` (the source of ``path`` under tests/) of a test module, relative or absolute, of a
    helper by a bare name, or a string (a subprocess script, a path) that imports or loads a test module."""
    package = list(path.relative_to(TESTS.parent).parent.parts)
    bad = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_text and _IMPORTS_A_TEST.search(node.value):
            bad.append(f"a string imports or loads a test module: {node.value.strip()[:60]!r}")
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if any(part.startswith("test_") or part == "conftest" for part in parts):
                bad.append(f"imports the test module {name}")
                break
            if _local_module(parts[0], local_names):
                bad.append(f"imports {name} by a bare name (use tests.helpers.{parts[0]})")
                break
    return bad


def test_no_test_module_imports_another_and_helpers_are_imported_from_the_package():
    local_names = {p.stem for p in _sources() if p.name != "__init__.py"}
    me = Path(__file__).resolve()  # holds the guard's own probes
    bad = {str(p.relative_to(TESTS.parent)): b for p in _sources()
           if p != me and (b := bad_imports(p.read_text(encoding="utf-8"), p, local_names))}
    assert not bad, bad


def test_the_import_guard_sees_relative_string_and_bare_imports():
    probe = ("from .test_resume import WORKER\nfrom eval_helpers import verdict\nimport json\n"
             "S = 'from test_system1 import Q'\nfrom tests.helpers.eval import verdict as v\n"
             "P = 'test_a.py'\n"
             '"""Docstring: test_a.py, tests/unit/test_b.py."""\n')
    bad = bad_imports(probe, TESTS / "unit" / "ingest" / "test_x.py", {"eval_helpers", "eval"})
    assert bad == ["imports the test module tests.unit.ingest.test_resume",
                   "imports eval_helpers by a bare name (use tests.helpers.eval_helpers)",
                   "a string imports or loads a test module: 'from test_system1 import Q'",
                   "a string imports or loads a test module: 'test_a.py'"], bad


def _compose_dir(conf: Path, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def test_config_files_parsed_once_compose_the_same_and_see_edits(tmp_path):
    """The session's parse cache (tests/conftest.py) gives the configs Hydra's own parsing gives, and a file
    edited on disk is parsed again."""
    from omegaconf import OmegaConf

    from mnemis.config import compose as compose_config
    from tests.helpers import compose as helper

    overrides = [["experiment=paper_locomo_k10", "retrieval.k=5"], ["experiment=quickstart"], []]
    cached = [OmegaConf.to_yaml(compose_config(o)) for o in overrides]
    assert helper._INSTALLED and helper._PARSED
    try:
        helper.restore_config_parsing()
        assert [OmegaConf.to_yaml(compose_config(o)) for o in overrides] == cached
    finally:
        helper.parse_config_files_once()
    conf = tmp_path / "conf"
    (conf / "size").mkdir(parents=True)
    (conf / "config.yaml").write_text("defaults:\n  - size: small\n  - _self_\nname: a\n")
    (conf / "size" / "small.yaml").write_text("n: 1\n")
    assert OmegaConf.to_container(_compose_dir(conf, [])) == {"name": "a", "size": {"n": 1}}
    (conf / "size" / "small.yaml").write_text("n: 2\n")
    assert _compose_dir(conf, ["name=b"]) == {"name": "b", "size": {"n": 2}}


def test_cached_compose_hands_out_copies():
    from tests.helpers.compose import compose, plain_config

    plain = plain_config(["experiment=quickstart"])
    plain["retrieval"]["k"] = -1
    assert plain_config(["experiment=quickstart"])["retrieval"]["k"] != -1
    cfg = compose(["experiment=quickstart"])
    cfg.retrieval.k = -1
    assert compose(["experiment=quickstart"]).retrieval.k != -1
