"""Base graph of 8 LoCoMo turns with SmolLM2-135M through vLLM on CPU, end to end.

Asserts structure (speaker entities, mentions for every non-empty turn, embeddings of every kind,
facts well formed, one batched call per extraction stage), not the quality of a 135M model's output.
Prints the per-stage prompt tokens per episode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "bench"))
from ingest_cost import build, cost_report, locomo_slice  # noqa: E402  (the cost benchmark's helpers)

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


@pytest.fixture(scope="module")
def backend(vllm_backend):
    """The session's shared SmolLM2 engine (tests/integration/conftest.py)."""
    return vllm_backend


def test_base_graph_with_smollm2_on_vllm_cpu(backend, locomo_path, tmp_path):
    from mnemis.models.embed import SentenceTransformerEmbedder

    eps = locomo_slice("conv-26", sessions=(1,), max_turns=8, path=str(locomo_path))
    assert len(eps) == 8
    store, stats, ledger = build(
        eps, tmp_path / "memory.sqlite", backend, SentenceTransformerEmbedder("minilm", device="cpu"),
        max_tokens={"extract_facts": 256, "reflect_facts": 192, "entity_attributes": 128},
        # the 135M model pads replies to max_tokens: keep the small budgets (shrunk schemas), as the
        # quickstart does
        show_progress=False, reply_budget="fit",
    )
    g = "conv-26"
    report = cost_report(ledger, len(eps))
    print(json.dumps(report, indent=1))
    ents = {e.id: e for e in store.entities(g)}
    speakers = {e.name for e in ents.values() if e.is_speaker}
    assert speakers == {e.speaker for e in eps}
    for ep in eps:  # the speaker rule: every turn mentions its speaker
        mentioned = {ents[m.entity_id].name for m in store.mentions(g, episode_ids=[ep.id])}
        assert ep.speaker in mentioned
    assert len(store.episodes(g)) == 8
    for f in store.facts(g):
        assert f.source_id in ents and f.target_id in ents and f.source_id != f.target_id
        assert f.relation and f.relation == f.relation.upper() and f.episode_ids
    assert store.embedded_ids(g, "episode") == {e.id for e in eps}
    assert store.embedded_ids(g, "entity_name") == set(ents)
    assert store.embedded_ids(g, "entity_summary") == set(ents)
    assert store.embedded_ids(g, "fact") == {f.id for f in store.facts(g)}
    for stage in ("extract_entities", "reflect_entities", "extract_facts"):
        st = ledger.stage(stage)
        # every episode is asked for names; facts only where two or more names were found
        assert (st.calls == 8 if stage != "extract_facts" else 1 <= st.calls <= 8) and st.prompt_tokens > 0
        assert st.batches == 1  # one generate() for all the episodes of the stage (retries stay inside it)
    assert report["prompt_tokens_per_episode"] > 0
    assert stats.totals.get("calls.extract_entities") == 8
