"""CachedReranker: duplicate pairs scored once, scores reused from disk, identity in the key."""

from __future__ import annotations

import numpy as np
import pytest

from mnemis.models.rerank_cache import CachedReranker


class CountingReranker:
    """Score = a deterministic function of (query, document); records every pair it was asked."""

    def __init__(self, model_id: str = "count-v1", instruction: str = "judge") -> None:
        self.model_id = model_id
        self.instruction = instruction
        self.calls: list[list[tuple[str, str]]] = []

    def score(self, query, documents):
        docs = list(documents)
        qs = [query] * len(docs) if isinstance(query, str) else list(query)
        self.calls.append(list(zip(qs, docs)))
        return np.asarray([(len(q) * 7 + len(d) * 3) % 11 / 10 for q, d in zip(qs, docs)], dtype=np.float32)


def _expected(qs, docs):
    return np.asarray([(len(q) * 7 + len(d) * 3) % 11 / 10 for q, d in zip(qs, docs)], dtype=np.float32)


def test_duplicates_within_a_call_are_scored_once_and_order_is_kept() -> None:
    inner = CountingReranker()
    rr = CachedReranker(inner)
    qs = ["q1", "q2", "q1", "q1", "q2"]
    docs = ["alpha", "alpha", "alpha", "beta", "alpha"]
    out = rr.score(qs, docs)
    np.testing.assert_allclose(out, _expected(qs, docs))
    assert sorted(inner.calls[0]) == [("q1", "alpha"), ("q1", "beta"), ("q2", "alpha")]
    assert rr.stats.to_dict() == {"pairs": 5, "unique": 3, "cache_hits": 0, "scored": 3, "hit_rate": 0.0}


def test_disk_cache_serves_a_second_process_and_scores_only_new_pairs(tmp_path) -> None:
    first = CachedReranker(CountingReranker(), tmp_path)
    first.score("when did she move", ["a", "bb", "ccc"])
    first.close()
    inner = CountingReranker()
    second = CachedReranker(inner, tmp_path)
    out = second.score("when did she move", ["bb", "dddd", "a"])
    np.testing.assert_allclose(out, _expected(["when did she move"] * 3, ["bb", "dddd", "a"]))
    assert inner.calls == [[("when did she move", "dddd")]]
    assert second.stats.cache_hits == 2 and second.stats.scored == 1
    assert second.stats.to_dict()["hit_rate"] == pytest.approx(2 / 3, abs=1e-4)


def test_a_different_model_or_instruction_is_a_different_key(tmp_path) -> None:
    CachedReranker(CountingReranker("m1"), tmp_path).score("q", ["d"])
    other_model = CountingReranker("m2")
    CachedReranker(other_model, tmp_path).score("q", ["d"])
    other_instr = CountingReranker("m1", instruction="another task")
    CachedReranker(other_instr, tmp_path).score("q", ["d"])
    assert other_model.calls == [[("q", "d")]] and other_instr.calls == [[("q", "d")]]


def test_everything_cached_makes_no_model_call(tmp_path) -> None:
    CachedReranker(CountingReranker(), tmp_path).score(["x", "y"], ["d1", "d2"])
    inner = CountingReranker()
    out = CachedReranker(inner, tmp_path).score(["y", "x"], ["d2", "d1"])
    assert inner.calls == []
    np.testing.assert_allclose(out, _expected(["y", "x"], ["d2", "d1"]))


def test_bad_inputs_and_bad_model_outputs_are_errors() -> None:
    rr = CachedReranker(CountingReranker())
    with pytest.raises(ValueError, match="2 queries for 3 documents"):
        rr.score(["a", "b"], ["1", "2", "3"])

    class Short(CountingReranker):
        def score(self, query, documents):
            return np.zeros(1)

    with pytest.raises(RuntimeError, match="returned 1 scores for 2 pairs"):
        CachedReranker(Short()).score("q", ["a", "b"])
    assert len(rr.score("q", [])) == 0
