"""Guards of the test suite itself: missing data fails in CI, and the run order keeps the shared vLLM engine
away from the unit tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from run_order import last_engine_user, sort_items


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

