"""Fusion options that keep what the walk found: reciprocal-rank fusion of the two routes' lists, and a
reranker bounded by a per-question pair budget (the head of that order scored, the rest kept in it)."""

from __future__ import annotations

import pytest

from mnemis.retrieve.fuse import Fuser
from tests.helpers.compose import plain_config
from tests.helpers.system2 import OverlapReranker, build_store, ep_id
from tests.helpers.fusion import Q, s1_ctx, s2_ctx


@pytest.fixture
def store(tmp_path):
    s = build_store(tmp_path / "m.db")
    yield s
    s.close()


EPS = [ep_id("g1", n) for n in range(4)]


def test_rrf_routes_interleaves_the_walk_and_lifts_what_both_routes_found(store):
    q = Q("yoga?")
    s1 = s1_ctx(q, eps=[EPS[0], EPS[1], EPS[2]])
    s2 = s2_ctx(q, eps=[EPS[3], EPS[2]])
    [appended] = Fuser(store, k=10, scorer="rrf").fuse([q], [s1], [s2])
    assert [h.id for h in appended.episodes] == [EPS[0], EPS[1], EPS[2], EPS[3]]
    [fused] = Fuser(store, k=10, scorer="rrf_routes", rrf_k=1).fuse([q], [s1], [s2])
    # EPS[2]: 1/(1+3) + 1/(1+2); EPS[0]: 1/2; EPS[3]: 1/2 (System-2's first); EPS[1]: 1/3
    assert [h.id for h in fused.episodes] == [EPS[2], EPS[0], EPS[3], EPS[1]]
    assert fused.episodes[0].score == pytest.approx(1 / 4 + 1 / 3)
    # a fallen-back walk leaves System-1's order untouched
    [fb] = Fuser(store, k=10, scorer="rrf_routes").fuse([q], [s1], [s2_ctx(q, flags=["s2_fallback"])])
    assert [h.id for h in fb.episodes] == [EPS[0], EPS[1], EPS[2]]


def test_the_pair_budget_scores_the_head_of_the_fused_order_and_keeps_the_rest(store):
    q = Q("Caroline yoga relax?")
    s1 = s1_ctx(q, eps=[EPS[0], EPS[2], EPS[3]])
    s2 = s2_ctx(q, eps=[EPS[1]])
    rr = OverlapReranker()
    fuser = Fuser(store, rr, k=10, scorer="reranker", max_pairs=5, rrf_k=1)
    assert [fuser.pair_budget(f) for f in ("episodes", "entities", "facts")] == [1, 2, 2]
    [out] = fuser.fuse([q], [s1], [s2])
    assert len(rr.calls) == 1 and len(rr.calls[0][1]) == 1  # one episode pair scored (no entities or facts)
    # fused order: EPS[0] and EPS[1] (both rank 1; union order), EPS[2], EPS[3]; only EPS[0] is scored
    assert [h.id for h in out.episodes] == [EPS[0], EPS[1], EPS[2], EPS[3]]
    assert "rerank" in out.episodes[0].scores and "rerank" not in out.episodes[1].scores
    unbounded = OverlapReranker()
    Fuser(store, unbounded, k=10, scorer="reranker").fuse([q], [s1], [s2])
    assert len(unbounded.calls[0][1]) == 4  # without a budget every pair is scored, as before


def test_bad_fusion_settings_are_named(store):
    with pytest.raises(ValueError, match="unknown scorer 'borda'.*rrf_routes"):
        Fuser(store, scorer="borda")
    with pytest.raises(ValueError, match="max_pairs must be at least 3"):
        Fuser(store, OverlapReranker(), max_pairs=2)
    with pytest.raises(ValueError, match="rrf_k must be >= 0"):
        Fuser(store, scorer="rrf_routes", rrf_k=-1)


def test_the_selection_model_as_a_yes_no_scorer_is_one_config_away():
    cfg = plain_config(["reranker=qwen25_coder_1_5b_cpu", "retrieval.fusion.max_pairs=40"])
    assert cfg["reranker"]["_target_"] == "mnemis.models.rerank.CausalLMReranker"
    assert cfg["reranker"]["model"] == "qwen2.5-coder-1.5b" and cfg["retrieval"]["fusion"]["max_pairs"] == 40
    from mnemis.settings import FusionSettings

    assert FusionSettings(**cfg["retrieval"]["fusion"]).max_pairs == 40


def test_rrf_routes_counts_only_the_routes_the_mode_takes(store):
    q = Q("yoga?")
    s1 = s1_ctx(q, eps=[EPS[0], EPS[1]])
    s2 = s2_ctx(q, eps=[EPS[1]])
    [only1] = Fuser(store, k=10, mode="system1", scorer="rrf_routes", rrf_k=1).fuse([q], [s1], [s2])
    assert [h.id for h in only1.episodes] == [EPS[0], EPS[1]]  # System-2's vote for EPS[1] is not counted
    [both] = Fuser(store, k=10, mode="both", scorer="rrf_routes", rrf_k=1).fuse([q], [s1], [s2])
    assert [h.id for h in both.episodes] == [EPS[1], EPS[0]]


class _ReversingRanker:
    """A stand-in for System-1's rank_within: reverses every list (and records the call)."""

    def __init__(self):
        self.calls = 0

    def rank_within(self, questions, contexts):
        self.calls += 1
        out = [c.model_copy(deep=True) for c in contexts]
        for c in out:
            c.episodes = c.episodes[::-1]
        return out


def test_system2_order_similarity_hands_the_fusion_system1s_order_of_the_walk(store):
    q = Q("yoga?")
    s1 = s1_ctx(q, eps=[EPS[0], EPS[1]])
    s2 = s2_ctx(q, eps=[EPS[3], EPS[2]])
    ranker = _ReversingRanker()
    [walk] = Fuser(store, k=10, scorer="rrf_routes", rrf_k=1).fuse([q], [s1], [s2])
    [sim] = Fuser(store, k=10, scorer="rrf_routes", rrf_k=1, system2_order="similarity",
                  system1=ranker).fuse([q], [s1], [s2])
    assert ranker.calls == 1 and [h.id for h in s2.episodes] == [EPS[3], EPS[2]]  # the walk's record untouched
    # System-2's first item now is EPS[2]: tied with System-1's first, after it (union order)
    assert [h.id for h in walk.episodes] == [EPS[0], EPS[3], EPS[1], EPS[2]]
    assert [h.id for h in sim.episodes] == [EPS[0], EPS[2], EPS[1], EPS[3]]
    [only1] = Fuser(store, k=10, scorer="rrf_routes", mode="system1", system2_order="similarity").fuse([q], [s1], None)
    assert [h.id for h in only1.episodes] == [EPS[0], EPS[1]]  # no System-2 list: nothing to order
    with pytest.raises(ValueError, match="system1="):
        Fuser(store, k=10, scorer="rrf_routes", system2_order="similarity").fuse([q], [s1], [s2])
    with pytest.raises(ValueError, match="system2_order"):
        Fuser(store, scorer="rrf_routes", system2_order="relevance")


def test_system2_weight_scales_the_walks_vote_in_rrf_routes(store):
    q = Q("yoga?")
    s1 = s1_ctx(q, eps=[EPS[0], EPS[1], EPS[2]])
    s2 = s2_ctx(q, eps=[EPS[2], EPS[3]])
    order = lambda w: [h.id for h in Fuser(store, k=10, scorer="rrf_routes", rrf_k=1,  # noqa: E731
                                           system2_weight=w).fuse([q], [s1], [s2])[0].episodes]
    # weight 1: EPS[2] 1/4 + 1/2 leads; EPS[0] 1/2; EPS[3] 1/3 ties EPS[1] 1/3 (union order: System-1's first)
    assert order(1.0) == [EPS[2], EPS[0], EPS[1], EPS[3]]
    # weight 0.5: EPS[2] 1/4 + 1/4 = EPS[0]'s 1/2 (union order keeps EPS[0] first); EPS[3] 1/6 falls behind EPS[1]
    assert order(0.5) == [EPS[0], EPS[2], EPS[1], EPS[3]]
    # weight 0: System-1's order, the walk's own find at the tail
    assert order(0.0) == [EPS[0], EPS[1], EPS[2], EPS[3]]
    [fused] = Fuser(store, k=10, scorer="rrf_routes", rrf_k=1, system2_weight=0.5).fuse([q], [s1], [s2])
    assert fused.episodes[1].scores["rrf_routes"] == pytest.approx(1 / 4 + 0.5 / 2)
    with pytest.raises(ValueError, match="system2_weight must be >= 0"):
        Fuser(store, scorer="rrf_routes", system2_weight=-0.1)
    from mnemis.settings import FusionSettings

    cfg = plain_config(["retrieval.fusion.system2_weight=0.25"])
    assert FusionSettings(**cfg["retrieval"]["fusion"]).system2_weight == 0.25
