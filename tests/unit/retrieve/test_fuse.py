"""Fusion: union + dedup by id, budgets, modes, fallback, one batched reranker call, rrf order."""

from __future__ import annotations

import pytest

from mnemis.retrieve.fuse import Fuser
from tests.helpers.fusion import Q, s1_ctx, s2_ctx
from tests.helpers.system2 import OverlapReranker, build_store, cid, eid, ep_id


@pytest.fixture
def store(tmp_path):
    s = build_store(tmp_path / "m.db")
    yield s
    s.close()


def test_union_dedups_by_id_and_merges_scores(store):
    q = Q("gastritis?")
    s1 = s1_ctx(q, eps=[ep_id("g1", 0), ep_id("g1", 1)], ents=[eid("g1", "gastritis")], facts=["g1_f0"])
    s2 = s2_ctx(q, eps=[ep_id("g1", 1), ep_id("g1", 2)], ents=[eid("g1", "gastritis"), cid("g1", 1, "Health")])
    [out] = Fuser(store, k=10, scorer="rrf").fuse([q], [s1], [s2])
    assert [h.id for h in out.episodes] == [ep_id("g1", 0), ep_id("g1", 1), ep_id("g1", 2)]
    assert [h.id for h in out.entities] == [eid("g1", "gastritis"), cid("g1", 1, "Health")]
    assert set(out.episodes[1].scores) == {"rrf", "s2"}
    assert out.entities[1].kind == "category"


def test_budgets_k_and_2k(store):
    q = Q("x")
    eps = [ep_id("g1", n) for n in range(4)]
    ents = [eid("g1", n) for n in ("Caroline", "gastritis", "guitar", "yoga")]
    facts = ["g1_f0", "g1_f1", "g1_f2", "g1_f3"]
    [out] = Fuser(store, k=1, scorer="rrf").fuse([q], [s1_ctx(q, eps, ents, facts)], [s2_ctx(q)])
    assert (len(out.episodes), len(out.entities), len(out.facts)) == (1, 2, 2)
    [out3] = Fuser(store, k=1, scorer="rrf", graph_factor=3).fuse([q], [s1_ctx(q, eps, ents, facts)], [s2_ctx(q)])
    assert (len(out3.episodes), len(out3.entities), len(out3.facts)) == (1, 3, 3)


def test_modes_pick_routes(store):
    q = Q("x")
    s1 = s1_ctx(q, eps=[ep_id("g1", 0)])
    s2 = s2_ctx(q, eps=[ep_id("g1", 3)])
    ids = lambda mode: [h.id for h in Fuser(store, mode=mode, scorer="rrf").fuse([q], [s1], [s2])[0].episodes]  # noqa: E731
    assert ids("system1") == [ep_id("g1", 0)]
    assert ids("system2") == [ep_id("g1", 3)]
    assert ids("both") == [ep_id("g1", 0), ep_id("g1", 3)]
    assert [h.id for h in Fuser(store, mode="system1", scorer="rrf").fuse([q], [s1])[0].episodes] == [ep_id("g1", 0)]
    with pytest.raises(ValueError):
        Fuser(store, mode="both", scorer="rrf").fuse([q], [s1])
    with pytest.raises(ValueError):
        Fuser(store, mode="both")  # reranker scorer without a reranker
    with pytest.raises(ValueError):
        Fuser(store, mode="nope", scorer="rrf")


def test_fallback_uses_system1_and_keeps_flag(store):
    q = Q("x")
    s1 = s1_ctx(q, eps=[ep_id("g1", 0)])
    s2 = s2_ctx(q, eps=[ep_id("g1", 3)], flags=["s2_fallback", "s2_llm_failure"])
    for mode in ("system2", "both"):
        [out] = Fuser(store, mode=mode, scorer="rrf").fuse([q], [s1], [s2])
        assert [h.id for h in out.episodes] == [ep_id("g1", 0)]
        assert "s2_fallback" in out.flags
    [bare] = Fuser(store, mode="system2", scorer="rrf").fuse([q], None, [s2])
    assert bare.episodes == [] and "s2_fallback_without_system1" in bare.flags


def test_reranker_orders_each_type_in_one_batched_call(store):
    qa, qb = Q("Does Caroline play guitar?"), Q("Who visited Paris?", "g2", 1)
    s1 = [s1_ctx(qa, eps=[ep_id("g1", 0), ep_id("g1", 2)], facts=["g1_f0", "g1_f2"]),
          s1_ctx(qb, eps=[ep_id("g2", 0)], facts=["g2_f0"])]
    s2 = [s2_ctx(qa, ents=[cid("g1", 1, "Health"), eid("g1", "guitar")]),
          s2_ctx(qb, eps=[ep_id("g2", 1)], facts=["g2_f1"])]
    rr = OverlapReranker()
    out = Fuser(store, rr, k=10).fuse([qa, qb], s1, s2)
    assert len(rr.calls) == 1 and len(rr.calls[0][1]) == 10
    assert [h.id for h in out[0].facts] == ["g1_f2", "g1_f0"]  # "plays guitar" beats "has gastritis"
    assert out[0].entities[0].id == eid("g1", "guitar")
    assert [h.id for h in out[1].facts] == ["g2_f1", "g2_f0"]
    assert out[1].episodes[0].id == ep_id("g2", 1)
    assert all("rerank" in h.scores for c in out for h in (*c.episodes, *c.entities, *c.facts))
    # reranker text per type
    docs = rr.calls[0][1]
    assert "[2023/05/08 (Mon) 13:56] Caroline: I was diagnosed with gastritis last week." in docs
    assert "Caroline has gastritis (2023-05-09 – now)" in docs
    assert "Health [health]" in docs


def test_rrf_mode_appends_system2_after_system1(store):
    q = Q("x")
    s1 = s1_ctx(q, facts=["g1_f3", "g1_f1"])
    s2 = s2_ctx(q, facts=["g1_f0", "g1_f3", "g1_f2"])
    [out] = Fuser(store, scorer="rrf").fuse([q], [s1], [s2])
    assert [h.id for h in out.facts] == ["g1_f3", "g1_f1", "g1_f0", "g1_f2"]


def test_misaligned_inputs_rejected(store):
    q = Q("x")
    with pytest.raises(ValueError):
        Fuser(store, scorer="rrf").fuse([q], [s1_ctx(Q("x", "g2"))], [s2_ctx(q)])
    with pytest.raises(ValueError):
        Fuser(store, scorer="rrf").fuse([q], [], [s2_ctx(q)])


def test_cosine_reranker_orders_by_similarity(store):
    from mnemis.models.embed import HashingEmbedder
    from mnemis.models.rerank import CosineReranker

    q = Q("plays guitar in a band")
    s1 = s1_ctx(q, facts=["g1_f0", "g1_f1", "g1_f2", "g1_f3"])
    [out] = Fuser(store, CosineReranker(HashingEmbedder()), k=1, mode="system1").fuse([q], [s1])
    assert [h.id for h in out.facts][0] == "g1_f2" and len(out.facts) == 2
    assert out.facts[0].score >= out.facts[1].score
