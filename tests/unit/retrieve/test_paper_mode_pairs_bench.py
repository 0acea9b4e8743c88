"""experiments/bench/paper_mode_pairs.py: its scripted categoriser and selector read our real prompts,
and the pair count is the uncut union the fuser sends to the reranker."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from mnemis.ingest.embed_items import embed_missing
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.prompts.categorize import CATEGORIZE, NodeView
from mnemis.prompts.select_nodes import SELECT_NODES, CandidateView
from mnemis.retrieve.pipeline import run_retrieval
from mnemis.types import Question
from tests.helpers.compose import changed, run_settings
from tests.helpers.system2 import build_store

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("paper_mode_pairs", REPO / "experiments" / "bench" / "paper_mode_pairs.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)


def _req(msgs, stage="x") -> LLMRequest:
    return LLMRequest(messages=msgs, stage=stage)


def test_categoriser_groups_in_fours_then_stops_shrinking():
    many = [NodeView(f"Thing{i}", ["t"]) for i in range(14)]
    out = bench.categorize_reply(_req(CATEGORIZE.render(many, 1)))["assignments"]
    assert [len(a["indexes"]) for a in out] == [4, 4, 4, 2]
    assert sorted(i for a in out for i in a["indexes"]) == list(range(1, 15))
    few = bench.categorize_reply(_req(CATEGORIZE.render(many[:5], 2)))["assignments"]
    assert [a["indexes"] for a in few] == [[1], [2], [3], [4], [5]]


def test_selector_policies():
    cands = [CandidateView("n1", "Work", ["job"]), CandidateView("n2", "Music", ["guitar"]),
             CandidateView("n3", "Guitar lessons", [])]
    req = _req(SELECT_NODES.render("Which guitar does she play?", cands))
    short = bench.select_reply("shortcut_top")(req)["selections"]
    assert short == [{"id": "n2", "name": "Music", "take_all_children": True}]
    every = bench.select_reply("shortcut_all")(req)["selections"]
    assert [s["id"] for s in every] == ["n1", "n2", "n3"] and all(s["take_all_children"] for s in every)
    walk = bench.select_reply("overlap_walk")(req)["selections"]
    assert [s["id"] for s in walk] == ["n2", "n3"] and not any(s["take_all_children"] for s in walk)


def test_union_sizes_count_what_the_reranker_is_sent(tmp_path):
    store = build_store(tmp_path / "m.db")
    qs = [Question(group_id="g1", id="q0", question="Does Caroline play guitar?", answer="", category="1"),
          Question(group_id="g1", id="q1", question="Does Caroline play guitar?", answer="", category="1")]
    base = run_settings([]).retrieval
    cfg = changed(base, k=1, system1=changed(base.system1, k=1), fusion=changed(base.fusion, k=1, scorer="reranker"),
                  system2=changed(base.system2, max_items_per_type=None, max_facts_per_entity=None,
                                  max_episodes_per_entity=None, max_neighbours_per_entity=None),
                  context=changed(base.context, max_tokens=None))
    emb = HashingEmbedder(32)
    embed_missing(store, emb, kinds=("episode", "entity_summary", "fact"))
    rr = bench.CountingReranker()
    llm = LLM(ScriptedBackend(bench.responder("shortcut_top")), max_retries=0)
    out = run_retrieval(store, qs, cfg, embedder=emb, llm=llm, reranker=rr)
    pairs, tokens = bench.union_sizes(store, qs, out, cfg.fusion)
    assert sum(pairs) == rr.pairs and pairs[0] == pairs[1] > 5 and tokens[0] > pairs[0]
    assert all(len(c.episodes) == 1 for c in out.contexts)  # the cut happens after the count
    store.close()


@pytest.mark.slow
def test_quick_run_writes_the_report(tmp_path):
    out = tmp_path / "pairs.json"
    assert bench.main(["--quick", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    runs = rep["builds"]["quickstart"]["runs"]
    for policy in bench.POLICIES:
        for mode in ("paper", "default"):
            d = runs[policy][mode]["pairs_per_query"]
            assert d["n"] == 4 and d["max"] >= d["p95"] >= d["p50"] > 0
    assert runs["shortcut_top"]["paper"]["settings"]["max_items_per_type"] is None
    assert runs["shortcut_top"]["default"]["settings"]["max_items_per_type"] == 20
