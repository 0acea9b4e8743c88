"""VLLMReranker without an engine: a fake ``vllm`` module records what the runner would be sent."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from mnemis.models.rerank import pair_token_ids
from mnemis.models.rerank_vllm import HF_OVERRIDES, VLLMReranker, probs_yes


class _Tok:
    """Character-level tokenizer with the ``encode(..., truncation, max_length)`` signature."""

    def encode(self, text, add_special_tokens=False, truncation=False, max_length=None):
        ids = [ord(c) % 997 for c in text]
        return ids[:max_length] if truncation and max_length is not None else ids


class _Out:
    def __init__(self, probs):
        self.outputs = types.SimpleNamespace(probs=probs)


@pytest.fixture()
def fake_vllm(monkeypatch):
    made = {}

    class LLM:
        def __init__(self, **kwargs):
            made["kwargs"] = kwargs
            made["prompts"] = []

        def get_tokenizer(self):
            return _Tok()

        def classify(self, prompts, use_tqdm=True):
            made["prompts"].append(prompts)
            return [_Out([len(p["prompt_token_ids"]) / 1000.0]) for p in prompts]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    return made


def test_engine_is_the_pooling_runner_with_the_qwen3_reranker_overrides(fake_vllm):
    VLLMReranker("Qwen/Qwen3-Reranker-8B", max_length=2048, gpu_memory_utilization=0.25, dtype="bfloat16")
    kw = fake_vllm["kwargs"]
    assert kw["runner"] == "pooling" and kw["hf_overrides"] == HF_OVERRIDES
    assert kw["max_model_len"] == 2048 and kw["gpu_memory_utilization"] == 0.25 and kw["dtype"] == "bfloat16"


def test_pairs_go_as_the_transformers_path_token_ids_in_one_call(fake_vllm):
    rr = VLLMReranker("Qwen/Qwen3-Reranker-8B", max_length=300, instruction="judge it")
    docs = ["short doc", "a much longer document " * 40, "mid-sized document text"]
    out = rr.score("when did Caroline paint?", docs)
    [sent] = fake_vllm["prompts"]
    expected = pair_token_ids(_Tok(), "judge it", [("when did Caroline paint?", d) for d in docs], 300)
    assert [p["prompt_token_ids"] for p in sent] == expected
    assert max(len(t) for t in expected) <= 300  # the long pair was cut to the budget, the suffix kept
    np.testing.assert_allclose(out, [len(t) / 1000.0 for t in expected], rtol=1e-6)
    assert out.dtype == np.float32
    assert rr.score("q", []).shape == (0,) and len(fake_vllm["prompts"]) == 1  # nothing sent for no documents


def test_one_query_per_document_and_count_mismatch(fake_vllm):
    rr = VLLMReranker("Qwen/Qwen3-Reranker-8B")
    assert rr.score(["a", "b"], ["x", "y"]).shape == (2,)
    with pytest.raises(ValueError, match="2 queries for 3 documents"):
        rr.score(["a", "b"], ["x", "y", "z"])


def test_probs_yes_reads_one_or_two_class_outputs():
    assert probs_yes([0.7]) == pytest.approx(0.7)
    assert probs_yes([0.2, 0.8]) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="got 3"):
        probs_yes([0.1, 0.2, 0.7])
