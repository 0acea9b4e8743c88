"""The model roles record and the GPU memory plan: vLLM 0.32's start-up rule applied to every engine of a run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from mnemis.gpu_plan import ARCHS, CARDS, GIB, Engine, parse_gpu, plan, plan_config, vllm_budget
from mnemis.model_roles import BUILD, EVAL, ModelRoles
from tests.helpers.compose import run_settings

REPO = Path(__file__).resolve().parents[2]


def test_parameter_counts_reproduce_the_model_cards():
    """params() from each config.json's sizes gives the counts the hub reports for the safetensors."""
    assert ARCHS["Qwen/Qwen3-Embedding-0.6B"].params() == 595_776_512
    assert ARCHS["BAAI/bge-m3"].params() == 567_754_752
    assert round(ARCHS["Qwen/Qwen3-8B"].params() / 1e9, 2) == 8.19
    assert round(ARCHS["Qwen/Qwen3-32B"].params() / 1e9, 1) == 32.8
    assert round(ARCHS["google/embeddinggemma-300m"].params() / 1e6) == 308
    assert ARCHS["Qwen/Qwen3-8B"].kv_bytes_per_token(2) == 2 * 36 * 8 * 128 * 2
    assert ARCHS["Qwen/Qwen3-32B"].kv_bytes_per_token(2, tp=4) == 2 * 64 * 2 * 128 * 2


def test_cards_and_counts():
    assert parse_gpu("h200") == (CARDS["h200"], 1) and parse_gpu("H100-80GBx4") == (CARDS["h100-80gb"], 4)
    for bad in ("h300", "h200x0", "x4", ""):
        with pytest.raises(ValueError, match="a100-80gb"):
            parse_gpu(bad)


def test_every_role_is_listed_once_with_its_stages():
    plain = run_settings(["experiment=paper_locomo_k10", "+llm@selector_llm=qwen3_32b_vllm"])
    roles = ModelRoles.of(plain)
    names = [name for name, _ in roles]
    assert names == ["llm", "categoriser", "selector_llm", "answer_llm", "embedder", "reranker"]
    assert roles.get("selector_llm").node["backend"]["model"] == "Qwen/Qwen3-32B"
    assert roles.get("answer_llm").key == "llm" and roles.get("answer_llm").node == plain.llm
    engines = {names[0]: (names, role) for names, role in roles.engines()}
    assert engines["llm"][0] == ("llm", "categoriser", "answer_llm") and engines["llm"][1].stages == (BUILD, EVAL)
    assert engines["selector_llm"][1].stages == (EVAL,)
    peers = run_settings(["experiment=quickstart", "methods=[rag,graphiti]"])
    server = ModelRoles.of(peers).get("peers_server")
    assert server.kind == "server" and server.node["backend"]["model"] == "smollm2-135m"
    assert ModelRoles.of(peers).get("categoriser") is None  # no graph method: no hierarchy


def _engine(**kw) -> Engine:
    base = dict(roles=("llm",), model="Qwen/Qwen3-8B", runtime="vllm", stages=(BUILD, EVAL), dtype_bytes=2,
                params=ARCHS["Qwen/Qwen3-8B"].params(), arch=ARCHS["Qwen/Qwen3-8B"], util_key="llm.backend.x",
                util=0.5, max_model_len=32768)
    return Engine(**{**base, **kw})


def test_a_second_engine_starts_only_when_its_fraction_is_free():
    """vLLM's request_memory: free >= ceil(util x total). Two engines at 0.45 + 0.45 fit an H200 with the
    contexts; 0.5 + 0.5 do not, and the refusal names both numbers."""
    h200 = CARDS["h200"]
    rer = dict(roles=("reranker",), model="Qwen/Qwen3-Reranker-8B", arch=ARCHS["Qwen/Qwen3-Reranker-8B"],
               stages=(EVAL,), max_model_len=4096, pooling=True, util_key="reranker.x")
    ok = plan([_engine(util=0.45), _engine(util=0.45, **rer)], h200)
    assert ok.fits, ok.problems
    bad = plan([_engine(util=0.5), _engine(util=0.5, **rer)], h200)
    free = h200.total - 1 * GIB - math.ceil(0.5 * h200.total) - 1 * GIB - 1 * GIB
    assert not bad.fits and f"free {free / GIB:.1f} GiB < gpu_memory_utilization 0.5 x 139.7 GiB = 69.9 GiB" in \
        bad.problems[0]
    # the suggested fractions fit when applied
    utils = dict(kv.split("=") for kv in bad.suggestion.removeprefix("fits with ").split())
    again = plan([_engine(util=float(utils["llm.backend.x"])), _engine(util=float(utils["reranker.x"]), **rer)], h200)
    assert again.fits, again.problems


def test_an_engine_budget_must_hold_one_full_window():
    """vLLM refuses an engine whose KV cache cannot hold one max_model_len sequence."""
    small = plan([_engine(util=0.2)], CARDS["h100-80gb"])  # 15.8 GiB budget < 15.3 GiB weights + the rest
    assert not small.fits and "one 32768-token sequence needs 4.50 GiB (vLLM refuses)" in small.problems[0]
    b = vllm_budget(_engine(util=0.6), CARDS["h200"])
    assert b.ok() and b.kv > 60 * GIB and b.weights == ARCHS["Qwen/Qwen3-8B"].params() * 2


def test_tensor_parallel_needs_its_gpus():
    roles = ModelRoles.of(run_settings(["experiment=paper_lme_s", "llm=qwen3_32b_vllm_tp4"]))
    one = plan_config(roles, CARDS["h200"], 1)
    assert not one.fits and "tensor_parallel_size 4 needs 4 GPUs" in one.problems[0]
    assert plan_config(roles, CARDS["h200"], 4).fits


def test_the_plans_table_is_current_and_every_shipped_experiment_fits_an_h200():
    res = subprocess.run([sys.executable, "experiments/bench/gpu_plans.py", "--check"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    plans = json.loads((REPO / "experiments/results/gpu_plans.json").read_text())["plans"]
    shipped = [p for p in plans if p["why"] == "shipped" and p["card"] == "h200"]
    assert len(shipped) == 5 and all(p["fits"] for p in shipped)


def test_engines_no_evaluation_role_uses_are_released_before_the_evaluation(monkeypatch):
    """The plan assumes the build's engine is shut down when the answerer and the judges are other models; the
    engine start (mnemis.components.Models) does so, and keeps engines an evaluation role shares."""
    from mnemis import components

    closed = []

    class Client:
        def __init__(self, model):
            self.backend = type("Backend", (), {"model": model, "close": lambda _self: closed.append(model)})()

    plain = run_settings(["experiment=paper_locomo_k10"])
    build = plain.llm
    other = {**build, "backend": {**build["backend"], "model": "Qwen/Qwen3-32B"}}
    monkeypatch.setattr(components, "_MODELS", {})
    two = plain.model_copy(update={"answer_llm": other, "selector_llm": other})
    models = components.Models(two.models())
    components._MODELS["llm:" + components.node_key(build)] = Client("Qwen/Qwen3-8B")
    components._MODELS["llm:" + components.node_key(other)] = Client("Qwen/Qwen3-32B")
    components._MODELS["embedder:{}"] = object()
    assert models.release_unused(ModelRoles.of(two), EVAL) == ["Qwen/Qwen3-8B"] and closed == ["Qwen/Qwen3-8B"]
    assert list(components._MODELS) == ["llm:" + components.node_key(other), "embedder:{}"]
    shared = components.Models(plain.models())  # answer_llm null = llm: the build engine answers, so it stays
    components._MODELS["llm:" + components.node_key(build)] = Client("Qwen/Qwen3-8B")
    assert shared.release_unused(ModelRoles.of(plain), EVAL) == ["Qwen/Qwen3-32B"]  # the other model: no role of this config uses it
    assert "llm:" + components.node_key(build) in components._MODELS
