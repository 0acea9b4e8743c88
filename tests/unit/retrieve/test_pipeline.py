"""run_retrieval end to end on the hand-built store: System-1 (hashing embedder) + scripted System-2 +
an overlap reranker, from the composed retrieval settings; outputs saved."""

from __future__ import annotations

import json

import pytest

from mnemis.eval.run_dir import retrieval_files, write_files
from mnemis.ingest.embed_items import embed_missing
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.retrieve.pipeline import run_retrieval
from mnemis.settings import RetrievalSettings
from mnemis.types import Question
from tests.helpers.compose import changed, run_settings
from tests.helpers.system2 import OverlapReranker, build_store, cid, eid, selector

HEALTH = "What health problem does Caroline have?"


def _cfg(name: str) -> RetrievalSettings:
    return run_settings([f"retrieval={name}"]).retrieval


@pytest.fixture
def setup(tmp_path):
    store = build_store(tmp_path / "m.db")
    emb = HashingEmbedder()
    embed_missing(store, emb, kinds=("episode", "entity_summary", "fact"))
    yield store, emb
    store.close()


def questions():
    return [Question(group_id="g1", id="a", question=HEALTH, answer="", category="1"),
            Question(group_id="g1", id="b", question="Unrelated?", answer="", category="2"),
            Question(group_id="g2", id="c", question="Where did Bob travel?", answer="", category="2")]


def test_configs_compose_and_run(setup, tmp_path):
    store, emb = setup
    plan = {HEALTH: {"Lifestyle": False, "Health": False, "gastritis": False},
            "Where did Bob travel?": {"Travel": True}}
    backend = ScriptedBackend(selector(plan))
    llm = LLM(backend, max_retries=0)
    rr = OverlapReranker()
    cfg = _cfg("mnemis")
    assert cfg.fusion.scorer == "rrf_routes"  # our default: the routes' lists fused by rank, no reranker call
    fused_by_rank = run_retrieval(store, questions(), cfg, embedder=emb, llm=llm, reranker=rr)
    assert rr.calls == [] and len(backend.batches) == 3
    assert cid("g1", 1, "Health") in {h.id for h in fused_by_rank.contexts[0].entities}
    cfg = changed(cfg, fusion=changed(cfg.fusion, scorer="reranker"))  # the paper's fusion: one reranker call
    out = run_retrieval(store, questions(), cfg, embedder=emb, llm=llm, reranker=rr)
    assert len(rr.calls) == 1 and len(backend.batches) == 6
    a, b, c = out.contexts
    assert cid("g1", 1, "Health") in {h.id for h in a.entities}
    assert "s2_fallback" in b.flags and b.episodes  # System-1 alone
    assert eid("g2", "Paris") in {h.id for h in c.entities}
    assert all(len(x.episodes) <= 10 and len(x.entities) <= 20 and len(x.facts) <= 20 for x in out.contexts)
    assert "## Conversation messages" in out.texts[0]
    assert set(out.routes()) == {"system1", "system2", "fused"}
    write_files(tmp_path / "run", retrieval_files(out))
    trav = [json.loads(x) for x in (tmp_path / "run" / "traversal.jsonl").read_text().splitlines()]
    assert [t["question_id"] for t in trav] == ["a", "b", "c"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "contexts.jsonl").read_text().splitlines()]
    assert rows[0]["text"] == out.texts[0]
    cost = json.loads((tmp_path / "run" / "selection_cost.json").read_text())
    assert cost["fallbacks"] == 1 and cost["calls"] == 5


def test_system1_reranked_makes_no_llm_calls(setup):
    store, emb = setup
    backend = ScriptedBackend(selector({}))
    cfg = _cfg("system1_reranked")
    out = run_retrieval(store, questions(), cfg, embedder=emb, llm=LLM(backend), reranker=OverlapReranker())
    assert backend.batches == [] and out.system2 is None
    assert all(len(x.episodes) <= 10 for x in out.contexts)


def test_system2_only_needs_an_llm(setup):
    store, emb = setup
    with pytest.raises(ValueError):
        run_retrieval(store, questions(), _cfg("system2_only"), embedder=emb, reranker=OverlapReranker())


def test_system2_order_similarity_ranks_the_walk_lists_before_fusion(setup):
    """fusion.system2_order=similarity: System-2's lists reach the fuser in System-1's order over what the walk
    reached (the walk's own record keeps its order); walk order keeps the walk's."""
    from mnemis.retrieve.system1 import System1

    store, emb = setup
    plan = {HEALTH: {"Lifestyle": False, "Health": False, "gastritis": False},
            "Where did Bob travel?": {"Travel": True}}
    cfg = _cfg("mnemis")
    assert cfg.fusion.system2_order == "similarity"  # our default; mode=paper keeps the walk's order
    assert run_settings(["retrieval=mnemis", "mode=paper"]).retrieval.fusion.system2_order == "walk"
    only_s2 = changed(cfg, fusion=changed(cfg.fusion, mode="system2", k=1000, system2_order="walk"))
    walk = run_retrieval(store, questions(), only_s2, embedder=emb, llm=LLM(ScriptedBackend(selector(plan))))
    sim_cfg = changed(only_s2, fusion=changed(only_s2.fusion, system2_order="similarity"))
    sim = run_retrieval(store, questions(), sim_cfg, embedder=emb, llm=LLM(ScriptedBackend(selector(plan))))
    s1 = System1(store, emb, **cfg.system1.kwargs())
    want = s1.rank_within(questions(), [r.context for r in walk.system2])
    for w, s, ctx in zip(walk.contexts, sim.contexts, want):
        if "s2_fallback" in s.flags:
            continue
        for f in ("episodes", "entities", "facts"):
            assert [h.id for h in getattr(s, f)] == [h.id for h in getattr(ctx, f)]
            assert sorted(h.id for h in getattr(s, f)) == sorted(h.id for h in getattr(w, f))
    assert [[h.id for h in r.context.episodes] for r in sim.system2] == \
           [[h.id for h in r.context.episodes] for r in walk.system2]  # the walk's record is unchanged
    assert any([h.id for h in getattr(w, f)] != [h.id for h in getattr(s, f)]
               for w, s in zip(walk.contexts, sim.contexts) for f in ("episodes", "entities", "facts"))
