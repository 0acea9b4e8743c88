"""Exactness of every vector index against brute force; save/load; bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mnemis.index.vector import ExactIndex, FaissIndex, load_vector_index, make_vector_index


def _data(n: int, d: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return [f"id{i}" for i in range(n)], x


def _brute(x: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(q @ x.T), axis=1, kind="stable")[:, :k]


EXACT = [("exact", {}), ("faiss_flat", {"use_gpu": False})]
ALL = EXACT + [("faiss_ivf", {"nlist": 4, "nprobe": 4, "use_gpu": False}), ("faiss_hnsw", {"M": 16, "efSearch": 200})]


@pytest.mark.parametrize("name,params", ALL)
def test_matches_brute_force(name, params):
    ids, x = _data(300, 32)
    _, q = _data(20, 32, seed=1)
    idx = make_vector_index(name, **params)
    idx.add(ids[:150], x[:150])
    idx.add(ids[150:], x[150:])  # incremental add
    scores, got = idx.search(q, 10)
    want = _brute(x, q, 10)
    assert scores.shape == (20, 10)
    for row, (g, w) in enumerate(zip(got, want)):
        assert g == [ids[j] for j in w], f"{name} row {row}"  # nprobe = nlist and a wide beam make these exact
        np.testing.assert_allclose(scores[row], (q[row] @ x.T)[w], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,params", ALL)
def test_k_larger_than_collection_returns_all(name, params):
    ids, x = _data(7, 16)
    idx = make_vector_index(name, **params)
    idx.add(ids, x)
    scores, got = idx.search(x[:2], 50)
    assert scores.shape == (2, 7)
    assert sorted(got[0]) == sorted(ids) and got[0][0] == "id0"


@pytest.mark.parametrize("name,params", EXACT)
def test_empty_index_and_empty_queries(name, params):
    idx = make_vector_index(name, dim=8, **params)
    scores, got = idx.search(np.ones((3, 8), np.float32), 5)
    assert scores.shape == (3, 0) and got == [[], [], []]
    idx.add(*_data(4, 8))
    scores, got = idx.search(np.zeros((0, 8), np.float32), 5)
    assert len(scores) == 0 and got == []  # no queries: no rows (the width is not specified)


@pytest.mark.parametrize("name,params", ALL)
def test_save_load_roundtrip(tmp_path, name, params):
    ids, x = _data(64, 16)
    idx = make_vector_index(name, **params)
    idx.add(ids, x)
    idx.save(tmp_path / "v")
    back = load_vector_index(tmp_path / "v", use_gpu=False)
    s1, i1 = idx.search(x[:5], 6)
    s2, i2 = back.search(x[:5], 6)
    assert i1 == i2
    np.testing.assert_allclose(s1, s2, rtol=1e-6)


@pytest.mark.parametrize("cls", [ExactIndex, lambda: FaissIndex(use_gpu=False)])
def test_bad_input_rejected(cls):
    idx = cls()
    ids, x = _data(5, 8)
    bad = x.copy()
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        idx.add(ids, bad)
    with pytest.raises(ValueError, match="ids"):
        idx.add(ids[:4], x)
    idx.add(ids, x)
    with pytest.raises(ValueError, match="unique"):
        idx.add(["id0"], x[:1])
    with pytest.raises(ValueError, match="dimension"):
        idx.search(np.ones((1, 9), np.float32), 3)
    with pytest.raises(ValueError, match="k must be"):
        idx.search(x[:1], -1)


def test_unknown_index_name():
    with pytest.raises(ValueError, match="unknown"):
        make_vector_index("annoy")
    with pytest.raises(ValueError, match="unknown faiss"):
        FaissIndex(kind="pq")


def test_ivf_with_fewer_vectors_than_cells():
    ids, x = _data(10, 8)
    idx = FaissIndex(kind="ivf", nlist=1024, nprobe=1024, use_gpu=False)
    idx.add(ids, x)
    _, got = idx.search(x[:3], 1)
    assert [g[0] for g in got] == ids[:3]


def _faiss_gpu() -> bool:
    import faiss

    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


@pytest.mark.gpu
@pytest.mark.parametrize("name,params", [("exact", {"device": "cuda"}), ("faiss_flat", {"use_gpu": True}),
                                         ("faiss_ivf", {"nlist": 4, "nprobe": 4, "use_gpu": True})])
def test_gpu_indexes_match_brute_force(name, params):
    if name.startswith("faiss") and not _faiss_gpu():
        pytest.skip("this faiss build has no GPU support (pip install faiss-gpu)")
    ids, x = _data(2000, 128)
    _, q = _data(64, 128, seed=1)
    idx = make_vector_index(name, **params)
    idx.add(ids, x)
    scores, got = idx.search(q, 10)
    want = _brute(x, q, 10)
    hits = np.mean([len(set(g) & {ids[j] for j in w}) / 10 for g, w in zip(got, want)])
    assert hits >= 0.999, f"{name}: recall@10 {hits} against brute force"
    np.testing.assert_allclose(scores[:, 0], (q * x[want[:, 0]]).sum(1), rtol=1e-3, atol=1e-3)
