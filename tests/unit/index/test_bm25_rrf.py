"""BM25 index behaviour and RRF arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemis.index.bm25 import BM25Index, tokenize
from mnemis.index.rrf import rrf

DOCS = [
    "Caroline went to the LGBTQ support group yesterday",
    "Melanie is painting a sunrise over the lake",
    "Caroline researched adoption agencies",
    "We camped at the beach with the kids",
    "",
]
IDS = ["a", "b", "c", "d", "e"]


def test_tokenize_stems_and_drops_stopwords():
    assert tokenize(["The painters and the painting of paintings"]) == [["painter", "paint", "paint"]]
    assert tokenize(["The painting"], stem=False) == [["painting"]]
    assert tokenize(["the a of"]) == [[]]


def test_bm25_ranks_matching_documents_only():
    idx = BM25Index(DOCS, IDS)
    scores, ids = idx.search(["When did Caroline go to the support group?", "paint", "xyzzy", ""], 10)
    assert ids[0][0] == "a" and set(ids[0]) == {"a", "c"}
    assert list(scores[0]) == sorted(scores[0], reverse=True) and (scores[0] > 0).all()
    assert ids[1] == ["b"]  # stemming: "painting" matches "paint"
    assert ids[2] == [] and ids[3] == []
    assert BM25Index(DOCS, IDS, stem=False).search(["paint"], 3)[1] == [[]]


def test_bm25_scores_agree_with_formula():
    docs = ["apple banana", "apple apple cherry", "banana"]
    idx = BM25Index(docs, ["x", "y", "z"], stopwords=False, stem=False, k1=1.5, b=0.75, method="lucene")
    n, avgdl = 3, (2 + 3 + 1) / 3
    idf = math.log(1 + (n - 2 + 0.5) / (2 + 0.5))  # "apple" is in two documents
    tf, dl = 2, 3
    want = idf * tf / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / avgdl))  # Lucene: no (k1 + 1) factor
    assert idx.scores("apple")[1] == pytest.approx(want, rel=1e-5)


def test_bm25_k_and_save_load(tmp_path):
    idx = BM25Index(DOCS, IDS)
    assert len(idx.search(["Caroline"], 1)[1][0]) == 1
    assert idx.search(["Caroline"], 0)[1] == [[]]
    idx.save(tmp_path / "b")
    back = BM25Index.load(tmp_path / "b")
    for q in ["Caroline adoption", "beach kids", "sunrise"]:
        (s1, i1), (s2, i2) = idx.search([q], 5), back.search([q], 5)
        assert i1 == i2 and np.allclose(s1[0], s2[0])
    empty = BM25Index([], [])
    assert empty.search(["anything"], 3)[1] == [[]]
    empty.save(tmp_path / "e")
    assert len(BM25Index.load(tmp_path / "e")) == 0


def test_bm25_top_k_breaks_ties_by_document_order_on_any_cpu():
    # 1,000 documents with the same score (one "apple", same length) and a few better ones: which tied
    # documents fill the last places must not depend on numpy's select kernel (AVX-512 or scalar), or a
    # replay on another machine builds other prompts than the run it replays
    words = [f"w{i}" for i in range(1200)]
    docs = [f"apple {w}" for w in words[:1000]] + [f"apple apple {w}" for w in words[1000:1004]]
    docs += [f"pear {w}" for w in words[1004:1100]]
    ids = [f"d{i:04d}" for i in range(len(docs))]
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(docs))  # stored order != id order; ties follow the stored (document) order
    idx = BM25Index([docs[j] for j in perm], [ids[j] for j in perm], stopwords=False, stem=False)
    scores, found = idx.search(["apple"], 10)
    stored = [ids[j] for j in perm]
    best = {f"d{i:04d}" for i in range(1000, 1004)}
    tied_in_stored_order = [i for i in stored if i not in best and i < "d1000"]
    assert set(found[0][:4]) == best
    assert found[0][4:] == tied_in_stored_order[:6]
    assert len(set(scores[0][4:].tolist())) == 1
    for k in (1, 4, 5, 37, 999):
        _, f = idx.search(["apple"], k)
        assert f[0] == (found[0] if k <= 10 else idx.search(["apple"], 1004)[1][0])[:k]


def test_bm25_rejects_bad_input():
    with pytest.raises(ValueError):
        BM25Index(["a"], ["x", "y"])
    with pytest.raises(ValueError, match="unique"):
        BM25Index(["a", "b"], ["x", "x"])


def test_rrf_arithmetic():
    f = rrf({"cosine": (["a", "b", "c"], [0.9, 0.8, 0.7]), "bm25": (["c", "a"], [5.0, 3.0])}, k_rrf=60)
    want = {"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61}
    assert f.ids == ["a", "c", "b"]
    assert f.scores == pytest.approx([want[i] for i in f.ids])
    assert f.parts[0] == {"cosine": 0.9, "bm25": 3.0} and f.parts[2] == {"cosine": 0.8}


def test_rrf_graphiti_constant_weights_and_limit():
    lists = {"cosine": (["a", "b"], [0.9, 0.8]), "bm25": (["b", "a"], [2.0, 1.0])}
    f0 = rrf(lists, k_rrf=0)
    assert f0.scores == pytest.approx([1.5, 1.5])
    assert f0.ids == ["a", "b"]  # tie: best rank, then first-seen order
    fw = rrf(lists, k_rrf=0, weights={"bm25": 3.0})
    assert fw.ids == ["b", "a"] and fw.scores == pytest.approx([3 + 0.5, 1 + 1.5])
    assert rrf(lists, limit=1).ids == ["a"]
    assert rrf({}).ids == []


def test_rrf_rejects_bad_input():
    with pytest.raises(ValueError, match="repeats"):
        rrf({"x": (["a", "a"], [1, 1])})
    with pytest.raises(ValueError, match="unknown lists"):
        rrf({"x": (["a"], [1])}, weights={"y": 2})
    with pytest.raises(ValueError, match="k_rrf"):
        rrf({"x": (["a"], [1])}, k_rrf=-1)
    with pytest.raises(ValueError, match="scores"):
        rrf({"x": (["a"], [1, 2])})
