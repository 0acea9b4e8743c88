"""Evidence recall per route: direct episodes vs. reachable through mentions and fact provenance."""

from __future__ import annotations

import pytest

from mnemis.eval.route_recall import reachable_episodes, recall, recall_table, route_recall
from mnemis.types import Hit, Question, RetrievedContext
from tests.helpers.system2 import build_store, cid, eid, ep_id


def ctx(q, eps=(), ents=(), facts=()):
    return RetrievedContext(
        question_id=q.id, group_id=q.group_id, episodes=[Hit(id=i, kind="episode", score=1) for i in eps],
        entities=[Hit(id=i, kind="category" if i.startswith("cat_") else "entity", score=1) for i in ents],
        facts=[Hit(id=i, kind="fact", score=1) for i in facts],
    )


def Q(n, evidence, cat="1", group="g1"):
    return Question(group_id=group, id=f"q{n}", question="?", answer="", category=cat, evidence=list(evidence))


def test_pure_functions():
    q = Q(0, ["a", "b"])
    c = ctx(q, eps=["a"], ents=["e1", "cat_x"], facts=["f1"])
    reach = reachable_episodes(c, {"e1": ["c"], "cat_x": ["b"]}, {"f1": ["d"]})
    assert reach == {"a", "c", "d"}  # categories do not reach episodes
    assert recall(["a", "b"], reach) == 0.5 and recall([], reach) is None
    table = recall_table(["1", "2", "1"], [1.0, 0.0, None], [1.0, 0.5, None])
    assert table["1"] == {"direct": 1.0, "reachable": 1.0, "n": 1, "skipped": 1}
    assert table["overall"]["reachable"] == 0.75 and list(table)[-1] == "overall"
    with pytest.raises(ValueError):
        recall_table(["1"], [], [])


def test_route_recall_from_store(tmp_path):
    store = build_store(tmp_path / "m.db")
    qs = [Q(0, [ep_id("g1", 0), ep_id("g1", 3)], "1"), Q(1, [ep_id("g2", 1)], "2", "g2"), Q(2, [], "2")]
    routes = {
        "system1": [ctx(qs[0], eps=[ep_id("g1", 0)]), ctx(qs[1]), ctx(qs[2])],
        # sister's mentions reach episode 3; fact g2_f1 comes from g2 episode 1
        "system2": [ctx(qs[0], ents=[eid("g1", "sister"), cid("g1", 1, "Family")]), ctx(qs[1], facts=["g2_f1"]),
                    ctx(qs[2])],
    }
    out = route_recall(store, qs, routes)
    s1 = out["system1"]["1"]
    assert {k: s1[k] for k in ("direct", "reachable", "n", "skipped")} == {"direct": 0.5, "reachable": 0.5, "n": 1,
                                                                           "skipped": 0}
    assert s1["recall@5"] == s1["recall@20"] == 0.5 and s1["mrr"] == 1.0 and s1["hit@10"] == 1.0
    assert out["system2"]["1"]["direct"] == 0.0 and out["system2"]["1"]["reachable"] == 0.5
    assert {k: out["system2"]["2"][k] for k in ("direct", "reachable", "n", "skipped")} == {
        "direct": 0.0, "reachable": 1.0, "n": 1, "skipped": 1}
    assert out["system2"]["2"]["recall@10"] == 0.0 and out["system2"]["overall"]["mrr"] == 0.0
    assert out["system1"]["overall"]["n"] == 2
    with pytest.raises(ValueError):
        route_recall(store, qs, {"x": routes["system1"][:2]})
    store.close()


def test_route_recall_at_k_ranks_by_score_not_by_list_order(tmp_path):
    store = build_store(tmp_path / "m.db")
    q = Q(0, [ep_id("g1", 5)], "1")
    # the gold episode is listed last (e.g. a chronological context) but has the best score: rank 1
    hits = [Hit(id=ep_id("g1", i), kind="episode", score=float(i)) for i in range(6)]
    ctx_ = RetrievedContext(question_id=q.id, group_id="g1", episodes=hits)
    row = route_recall(store, [q], {"fused": [ctx_]})["fused"]["overall"]
    assert row["mrr"] == 1.0 and row["recall@5"] == 1.0
    low = [h.model_copy(update={"score": -h.score}) for h in hits]  # now the worst of six: rank 6
    row = route_recall(store, [q], {"fused": [ctx_.model_copy(update={"episodes": low})]})["fused"]["overall"]
    assert row["recall@5"] == 0.0 and row["recall@10"] == 1.0 and abs(row["mrr"] - 1 / 6) < 1e-9
    store.close()
