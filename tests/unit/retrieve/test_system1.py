"""System-1 search: budgets, routes, per-list scores, group isolation (property-tested), bad input."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemis.ingest.embed_items import embed_missing
from mnemis.models.embed import HashingEmbedder
from mnemis.retrieve.system1 import System1, UnknownGroupError, normalize_query
from mnemis.store.sqlite import GraphStore
from mnemis.types import Entity, Episode, Fact, Question
from tests.helpers.system1 import QUERIES, DenseEmbedder, same_hits

WORDS = "puppy hiking painting marathon apartment pottery guitar garden camping violin chess sushi".split()


def _episodes(gid: str, n: int, offset: int) -> list[Episode]:
    t0 = datetime(2023, 1, 1)
    return [
        Episode(group_id=gid, id=f"{gid}:D1:{p + 1}", source_id=f"D1:{p + 1}", name=f"{gid}-{p}", speaker="S",
                content=f"S: I like {WORDS[(p + offset) % 12]} and {WORDS[(3 * p + offset) % 12]}",
                valid_at=t0 + timedelta(seconds=30 * p), session=1, turn=p + 1, position=p)
        for p in range(n)
    ]


def _graph(gid: str, n: int, offset: int) -> tuple[list[Entity], list[Fact]]:
    ents = [Entity(group_id=gid, id=f"{gid}:e{i}", name=f"{WORDS[(i + offset) % 12].title()} thing",
                   summary=f"about {WORDS[(i + offset) % 12]}") for i in range(n)]
    facts = [Fact(group_id=gid, id=f"{gid}:f{i}", source_id=ents[0].id, target_id=ents[i % n].id, relation="LIKES",
                  fact=f"S likes {WORDS[(2 * i + offset) % 12]}") for i in range(2 * n)]
    return ents, facts


@pytest.fixture(scope="module")
def mem(tmp_path_factory):
    st_ = GraphStore(tmp_path_factory.mktemp("s1") / "mem.sqlite")
    for gid, n, off in [("a", 30, 0), ("b", 12, 5), ("c", 5, 7)]:
        st_.upsert_episodes(_episodes(gid, n, off))
        if gid != "c":
            ents, facts = _graph(gid, n // 3, off)
            st_.upsert_entities(ents)
            st_.upsert_facts(facts)
    emb = HashingEmbedder(dim=64)
    embed_missing(st_, emb, kinds=("episode", "entity_summary", "fact"))
    yield st_, emb
    st_.close()


def test_budgets_scores_and_order(mem):
    store, emb = mem
    s1 = System1(store, emb, k=3, cache_dir=None)
    assert s1.weights == {"cosine": 1.0, "bm25": 3.0} and s1.rrf_k == 10
    [ctx] = s1.search([("a", "Who likes hiking and pottery?")])
    assert ctx.group_id == "a" and ctx.question_id == "0"
    assert len(ctx.episodes) == 3 and len(ctx.entities) == 6 and len(ctx.facts) == 6
    for hits in (ctx.episodes, ctx.entities, ctx.facts):
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        for h in hits:
            assert h.scores["rrf"] == h.score and ({"cosine", "bm25"} & set(h.scores))
            want = sum(s1.weights[name] / (s1.rrf_k + r) for name, r in _ranks(s1, h, ctx))
            assert h.score == pytest.approx(want)
    assert {h.kind for h in ctx.episodes} == {"episode"} and ctx.facts[0].kind == "fact"
    assert any({"bm25", "cosine"} <= set(h.scores) for h in ctx.episodes)  # both lists fused


def _ranks(s1: System1, hit, ctx) -> list[tuple[str, int]]:
    """1-based ranks of ``hit`` in the cosine and BM25 pools, recomputed independently."""
    item = hit.kind
    idx = s1.catalog.get(ctx.group_id, item)
    pool = 2 * s1.budget(item)
    q = "Who likes hiking and pottery?"
    ranks = []
    _, vids = idx.vector.search(s1.embedder.encode([q], kind="query"), pool)
    if hit.id in vids[0]:
        ranks.append(("cosine", vids[0].index(hit.id) + 1))
    _, bids = idx.bm25.search([normalize_query(q)], pool)
    if hit.id in bids[0]:
        ranks.append(("bm25", bids[0].index(hit.id) + 1))
    return ranks


def test_paper_mode_keys_give_plain_reciprocal_rank_sums(mem):
    """mode=paper System-1: score = sum of 1/rank over the lists, BM25 over the turn itself, query as asked."""
    from mnemis.config import compose, to_plain

    store, emb = mem
    keys = to_plain(compose(["mode=paper"]))["retrieval"]["system1"]
    keys = {k: v for k, v in keys.items() if k in ("rrf_k", "weights", "recipe", "query_normalize", "bm25_params")}
    s1 = System1(store, emb, k=3, cache_dir=None, **keys)
    assert s1.rrf_k == 0 and s1.weights == {"cosine": 1.0, "bm25": 1.0} and not s1.query_normalize
    q = "Who likes hiking and pottery?"
    [ctx] = s1.search([("a", q)])
    idx = s1.catalog.get("a", "episode")
    assert idx.texts == [e.content for e in store.episodes("a")]  # the turn itself
    _, vids = idx.vector.search(emb.encode([q], kind="query"), 6)
    _, bids = idx.bm25.search([q], 6)  # no wh-word drop
    for h in ctx.episodes:
        want = sum(1 / (lst.index(h.id) + 1) for lst in (vids[0], bids[0]) if h.id in lst)
        assert h.score == pytest.approx(want)


def test_routes(mem):
    store, emb = mem
    q = [("b", "painting marathon")]
    rag = System1(store, emb, k=2, routes="rag", cache_dir=None).search(q)[0]
    graph = System1(store, emb, k=2, routes="graph", cache_dir=None).search(q)[0]
    assert rag.episodes and not rag.entities and not rag.facts
    assert graph.entities and graph.facts and not graph.episodes


def test_single_list_modes_and_min_cosine(mem):
    store, emb = mem
    q = [("a", "guitar garden")]
    cos = System1(store, emb, k=5, routes="rag", bm25=False, cache_dir=None).search(q)[0]
    assert all(set(h.scores) == {"cosine", "rrf"} for h in cos.episodes)
    bm = System1(store, None, k=5, routes="rag", vector=False, cache_dir=None).search(q)[0]
    assert bm.episodes and all(set(h.scores) == {"bm25", "rrf"} for h in bm.episodes)
    strict = System1(store, emb, k=5, routes="rag", bm25=False, min_cosine=0.99, cache_dir=None).search(q)[0]
    assert all(h.scores["cosine"] >= 0.99 for h in strict.episodes)


def test_batch_embeds_once_and_keeps_order(mem):
    store, _ = mem
    calls = []

    class Spy(HashingEmbedder):
        def encode(self, texts, *, kind="document"):
            calls.append((len(texts), kind))
            return super().encode(texts, kind=kind)

    s1 = System1(store, Spy(64), k=2, cache_dir=None)
    qs = [Question(group_id="b", id="qb", question="violin chess", answer="x", category="single-hop"),
          ("a", "sushi"), ("c", "camping"), ("a", "puppy")]
    out = s1.search(qs)
    assert calls == [(4, "query")]
    assert [c.group_id for c in out] == ["b", "a", "c", "a"] and out[0].question_id == "qb" and out[1].question_id == "1"


def test_k_larger_than_collection_and_empty_items(mem):
    store, emb = mem
    [ctx] = System1(store, emb, k=50, cache_dir=None).search([("c", "camping chess")])
    assert len(ctx.episodes) == 5  # every episode of group c, none from elsewhere
    assert ctx.entities == [] and ctx.facts == []  # group c has no graph items


def test_bad_input(mem):
    store, emb = mem
    s1 = System1(store, emb, cache_dir=None)
    with pytest.raises(UnknownGroupError, match="'nope'"):
        s1.search([("a", "x"), ("nope", "hiking")])
    with pytest.raises(ValueError, match="empty"):
        s1.search([("a", "   ")])
    assert s1.search([]) == []
    with pytest.raises(ValueError):
        System1(store, emb, k=0)
    with pytest.raises(ValueError):
        System1(store, emb, routes="all")
    with pytest.raises(ValueError):
        System1(store, None)


def test_unembedded_items_are_flagged_and_still_found_by_bm25(tmp_path):
    store = GraphStore(tmp_path / "m.sqlite")
    store.upsert_episodes(_episodes("g", 6, 0))
    emb = HashingEmbedder(32)
    embed_missing(store, emb)
    store.upsert_episodes(_episodes("g", 7, 0)[-1:])  # not embedded yet
    [ctx] = System1(store, emb, k=10, routes="rag", cache_dir=None).search([("g", WORDS[6])])
    assert "unembedded_episodes:1" in ctx.flags
    assert "g:D1:7" in [h.id for h in ctx.episodes]


@pytest.mark.parametrize("index", ["exact", "faiss_flat", "faiss_hnsw"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_result_from_another_group(mem, index, data):
    store, emb = mem
    s1 = _cached(store, emb, index)
    n = data.draw(st.integers(1, 6))
    groups = data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n))
    texts = data.draw(st.lists(st.lists(st.sampled_from(WORDS + ["who", "the"]), min_size=1, max_size=5)
                               .map(" ".join), min_size=n, max_size=n))
    for gid, ctx in zip(groups, s1.search(list(zip(groups, texts)))):
        assert ctx.group_id == gid
        for h in ctx.episodes + ctx.entities + ctx.facts:
            assert h.id.split(":")[0] == gid


_S1: dict[str, System1] = {}


def _cached(store, emb, index) -> System1:
    if index not in _S1 or _S1[index].store is not store:
        _S1[index] = System1(store, emb, k=int(np.random.default_rng(0).integers(1, 8)), index=index, cache_dir=None,
                             index_params={"use_gpu": False} if index == "faiss_flat" else {})
    return _S1[index]


def _distinct_store(path):
    """Three groups whose texts are all different, embedded without cosine ties."""
    store = GraphStore(path)
    for gid, n, off in [("a", 30, 0), ("b", 12, 5), ("c", 5, 7)]:
        eps = _episodes(gid, n, off)
        store.upsert_episodes([e.model_copy(update={"content": f"{e.content} note{gid}{i} x{7 * i + off}"})
                               for i, e in enumerate(eps)])
        ents, facts = _graph(gid, max(n // 3, 2), off)
        store.upsert_entities([e.model_copy(update={"summary": f"{e.summary} {gid}{i}"}) for i, e in enumerate(ents)])
        store.upsert_facts([f.model_copy(update={"fact": f"{f.fact} y{gid}{i}"}) for i, f in enumerate(facts)])
    embed_missing(store, DenseEmbedder(), kinds=("episode", "entity_summary", "fact"))
    return store


def test_grouped_index_equals_one_search_per_group(tmp_path):
    """index=grouped: every query of every group in one grouped top-k call, same hits as per-group search."""
    store = _distinct_store(tmp_path / "m.sqlite")
    emb = DenseEmbedder()
    want = System1(store, emb, k=3, cache_dir=None).search(QUERIES)
    got = System1(store, emb, k=3, cache_dir=None, index="grouped").search(QUERIES)
    same_hits(got, want)
    for ctx in got:  # group "c" has only 5 episodes: the pool's tail is empty, never another group's rows
        assert {h.id.split(":")[0] for h in ctx.episodes + ctx.entities + ctx.facts} == {ctx.group_id}
    store.close()


KERNEL_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
import mnemis.ops as ops
from mnemis.retrieve.system1 import System1
from mnemis.store.sqlite import GraphStore
from tests.helpers.system1 import QUERIES, DenseEmbedder, same_hits
calls = []
real = ops.grouped_topk
def spy(*a, **k):
    calls.append(ops.triton_available(a[0].device))
    return real(*a, **k)
ops.grouped_topk = spy
store, emb = GraphStore({db!r}), DenseEmbedder()
want = System1(store, emb, k=2, cache_dir=None, routes="rag").search(QUERIES[:3])
got = System1(store, emb, k=2, cache_dir=None, routes="rag", index="grouped").search(QUERIES[:3])
assert calls == [True], calls
same_hits(got, want)
print("kernel path ok")
"""


def test_grouped_index_runs_the_triton_kernel_under_the_interpreter(tmp_path):
    """The kernel path itself (TRITON_INTERPRET=1 runs it on CPU; set before triton is imported, so a fresh
    process) gives the same hits as the exact per-group search, in one launch for the batch."""
    pytest.importorskip("triton")
    import os
    import subprocess
    import sys
    from pathlib import Path

    _distinct_store(tmp_path / "m.sqlite").close()
    repo = str(Path(__file__).resolve().parents[3])
    script = KERNEL_SCRIPT.format(repo=repo, db=str(tmp_path / "m.sqlite"))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert res.returncode == 0 and "kernel path ok" in res.stdout, res.stderr[-3000:]


@pytest.mark.gpu
def test_grouped_index_on_cuda_runs_the_kernel_with_thesame_hits(tmp_path):
    """On a CUDA machine index=grouped launches the Triton kernel once per item type for the whole batch."""
    import torch

    import mnemis.ops as ops

    store = _distinct_store(tmp_path / "m.sqlite")
    emb = DenseEmbedder()
    want = System1(store, emb, k=3, cache_dir=None).search(QUERIES)
    assert ops.triton_available(torch.device("cuda"))
    got = System1(store, emb, k=3, cache_dir=None, index="grouped", device="cuda").search(QUERIES)
    same_hits(got, want)
    store.close()


def test_rank_within_orders_only_the_given_items_as_search_would(mem):
    """rank_within: the given lists in System-1's cosine+BM25 RRF order; nothing added or dropped; items no
    index holds (a category) keep their place after the ranked ones; inputs untouched."""
    from mnemis.types import Hit, RetrievedContext

    store, emb = mem
    s1 = System1(store, emb, k=3, pool_factor=100, cache_dir=None)
    q = Question(group_id="a", id="q", question="Who likes hiking and pottery?", answer="", category="1")
    eps = [e.id for e in store.episodes("a")]
    given = eps[::-1][:12]  # walk order: an arbitrary order of 12 of the 30 turns
    walk = RetrievedContext(question_id="q", group_id="a",
                            episodes=[Hit(id=i, kind="episode", score=0.0) for i in given],
                            entities=[Hit(id="a:cat1", kind="category", score=0.0),
                                      Hit(id="a:e1", kind="entity", score=0.0)])
    [ranked] = s1.rank_within([q], [walk])
    assert [h.id for h in walk.episodes] == given  # input untouched
    got = [h.id for h in ranked.episodes]
    assert sorted(got) == sorted(given)
    # System-1's full ranking restricted to these items, recomputed here: the index's cosine and BM25 ranks over
    # all 30 turns, fused by the weighted RRF (cosine 1, BM25 3, constant 10), then only the given turns kept
    idx = s1.catalog.get("a", "episode")
    _, vids = idx.vector.search(emb.encode([q.question], kind="query"), 30)
    cos_rank = {i: r for r, i in enumerate(vids[0], 1)}
    _, bids = idx.bm25.search([normalize_query(q.question)], 30)
    bm_rank = {i: r for r, i in enumerate(bids[0], 1)}
    score = {i: 1.0 / (10 + cos_rank[i]) + (3.0 / (10 + bm_rank[i]) if i in bm_rank else 0.0) for i in given}
    want = sorted(given, key=lambda i: (-score[i], min(cos_rank[i], bm_rank.get(i, 99))))
    assert got == want and got != given
    assert [h.scores["within_rrf"] for h in ranked.episodes] == pytest.approx([score[i] for i in want])
    assert [h.id for h in ranked.entities] == ["a:e1", "a:cat1"]  # the category has no index: it follows
    # a batch over two groups gives each context what it gets alone
    q2 = Question(group_id="a", id="q2", question="pottery garden", answer="", category="1")
    qb = Question(group_id="b", id="qb", question="camping", answer="", category="1")
    walk_b = RetrievedContext(question_id="qb", group_id="b",
                              episodes=[Hit(id=e.id, kind="episode", score=0.0) for e in store.episodes("b")][::-1])
    batch = s1.rank_within([q, qb, q2], [walk, walk_b, walk])
    alone = [s1.rank_within([x], [c])[0] for x, c in ((q, walk), (qb, walk_b), (q2, walk))]
    assert [[h.id for h in c.episodes] for c in batch] == [[h.id for h in c.episodes] for c in alone]
    assert [h.id for h in batch[0].episodes] != [h.id for h in batch[2].episodes]  # each query its own order
    with pytest.raises(ValueError, match="group"):
        s1.rank_within([q], [walk.model_copy(update={"group_id": "b"})])
    with pytest.raises(ValueError, match="contexts for"):
        s1.rank_within([q], [])
