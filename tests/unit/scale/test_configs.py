"""The scale-out LLM configs compose and their ``_target_``s accept their keys (no weights loaded)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[3] / "conf"
DUMMY = {"paths": {"cache_dir": "cache-root"}, "cache_mode": "readwrite"}
NEW = ("qwen3_32b_vllm_tp4", "vllm_serve_shared")


def _bind(node: dict) -> None:
    kwargs = {}
    for key, value in node.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict) and "_target_" in value:
            _bind(value)
            value = object()
        kwargs[key] = value
    module, _, name = node["_target_"].rpartition(".")
    inspect.signature(getattr(importlib.import_module(module), name)).bind(**kwargs)


def _compose(name: str) -> dict:
    from mnemis.config import compose

    cfg = compose([f"llm={name}", "paths.cache_dir=cache-root"])
    return OmegaConf.to_container(cfg.llm, resolve=True)


@pytest.mark.parametrize("name", NEW)
def test_llm_config_composes_and_binds(name):
    node = _compose(name)
    _bind(node)
    assert node["cache_dir"] == "cache-root/llm" and node["cache_mode"] == "readwrite"


def test_parallelism_values():
    assert _compose("qwen3_32b_vllm_tp4")["backend"]["tensor_parallel_size"] == 4
    assert not (CONF / "llm" / "qwen3_8b_vllm_dp4.yaml").exists()  # vLLM 0.32's LLM refuses data_parallel_size > 1
    shared = _compose("vllm_serve_shared")["backend"]
    assert shared["_target_"].endswith("OpenAIBackend") and 1 <= shared["max_concurrency"] <= 64
    assert shared["base_url"].startswith("http")


def test_shared_server_config_builds_a_client(tmp_path, monkeypatch):
    """The shared-endpoint node instantiates (HTTP backend: no server needed to construct it)."""
    from hydra.utils import instantiate

    monkeypatch.setenv("MNEMIS_VLLM_URL", "http://10.0.0.5:8000/v1")
    cfg = OmegaConf.merge(OmegaConf.create({"paths": {"cache_dir": str(tmp_path)}, "cache_mode": "readwrite"}),
                          {"llm": OmegaConf.load(CONF / "llm" / "vllm_serve_shared.yaml")})
    llm = instantiate(cfg.llm, _convert_="all")
    assert llm.backend.base_url == "http://10.0.0.5:8000/v1" and llm.backend.max_concurrency == 8
    assert llm.cache is not None and llm.cache.dir == tmp_path / "llm"
