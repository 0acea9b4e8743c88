"""embed_missing (idempotence, recipes, NaN rejection) and the index catalog (cache, staleness)."""

from __future__ import annotations

import numpy as np
import pytest

from mnemis.index.catalog import IndexCatalog
from mnemis.ingest.embed_items import embed_missing
from mnemis.models.embed import HashingEmbedder
from mnemis.store.sqlite import StoreError
from mnemis.texts import EpisodeRecipe, episode_texts


class CountingEmbedder(HashingEmbedder):
    def __init__(self, dim: int = 32) -> None:
        super().__init__(dim)
        self.calls: list[int] = []

    def encode(self, texts, *, kind="document"):
        self.calls.append(len(texts))
        return super().encode(texts, kind=kind)


class NaNEmbedder(HashingEmbedder):
    def encode(self, texts, *, kind="document"):
        out = super().encode(texts, kind=kind)
        out[0, 0] = np.nan
        return out


def test_episode_text_recipe(helpers):
    make_episodes, _ = helpers
    eps = make_episodes("g", ("Ann", "Ben"), 8)
    plain = episode_texts(eps, EpisodeRecipe(window=0))
    assert plain == [e.content for e in eps]
    ctx = episode_texts(eps, EpisodeRecipe(window=1, date=True))
    assert ctx[1].startswith("[") and eps[1].content in ctx[1]
    assert eps[0].content in ctx[1] and eps[2].content in ctx[1]
    assert eps[4].content not in ctx[3]  # neighbours stay inside their session (4 turns per session)


def test_embed_missing_is_batched_and_idempotent(tmp_path, helpers):
    make_episodes, populate = helpers
    from mnemis.store.sqlite import GraphStore

    st = GraphStore(tmp_path / "m.sqlite")
    populate(st, "g1", ("A", "B"), 14)
    populate(st, "g2", ("C", "D"), 8)
    emb = CountingEmbedder()
    n = embed_missing(st, emb, kinds=("episode", "fact"), recipe=EpisodeRecipe(window=1))
    assert n == {"episode": 22, "fact": 18} and emb.calls == [22, 18]  # one call per kind across groups
    assert embed_missing(st, emb, kinds=("episode", "fact"), recipe=EpisodeRecipe(window=1)) == {"episode": 0, "fact": 0}
    # a new episode re-embeds itself and its in-session neighbour (whose context changed)
    new = make_episodes("g1", ("A", "B"), 15)[-1]
    st.upsert_episodes([new])
    assert embed_missing(st, emb, recipe=EpisodeRecipe(window=1)) == {"episode": 2}
    # a different recipe re-embeds everything of that kind
    assert embed_missing(st, emb, recipe=EpisodeRecipe(window=0)) == {"episode": 23}
    ids, vecs = st.embeddings("g1", "episode")
    assert len(ids) == 15 and np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-5)
    with pytest.raises(ValueError, match="unknown embedding kind"):
        embed_missing(st, emb, kinds=("nope",))


def test_nan_embeddings_rejected_at_write_time(tmp_path, helpers):
    _, populate = helpers
    from mnemis.store.sqlite import GraphStore

    st = GraphStore(tmp_path / "m.sqlite")
    populate(st, "g1", ("A", "B"), 4, graph=False)
    with pytest.raises(StoreError, match="not finite"):
        embed_missing(st, NaNEmbedder(16))
    assert st.embeddings("g1", "episode")[0] == []  # nothing written


@pytest.mark.parametrize("vector", ["exact", "faiss_flat", "faiss_hnsw"])
def test_catalog_cache_and_staleness(store, tmp_path, vector, embedder, helpers):
    make_episodes, _ = helpers
    cat = IndexCatalog(store, vector=vector, cache_dir=tmp_path / "idx")
    a = cat.get("g1", "episode")
    assert len(a) == 24 and a.vector is not None and len(a.vector) == 24 and a.unembedded == 0
    assert cat.get("g1", "episode") is a  # memory cache
    again = IndexCatalog(store, vector=vector, cache_dir=tmp_path / "idx").get("g1", "episode")
    assert again.fingerprint == a.fingerprint and again.ids == a.ids
    q = embedder.encode(["golden retriever puppy"], kind="query")
    assert again.vector.search(q, 5)[1] == a.vector.search(q, 5)[1]
    assert again.bm25.search(["puppy"], 5)[1] == a.bm25.search(["puppy"], 5)[1]
    # new items make the cached index stale
    store.upsert_episodes(make_episodes("g1", ("Alice", "Bob"), 25)[-1:])
    cat.invalidate("g1")
    b = cat.get("g1", "episode")
    assert b.fingerprint != a.fingerprint and len(b) == 25 and b.unembedded == 1
    embed_missing(store, embedder, kinds=("episode",))
    cat.invalidate()
    assert cat.get("g1", "episode").unembedded == 0


def test_catalog_items_and_groups_are_separate(store):
    cat = IndexCatalog(store, cache_dir=None)
    ent, fact = cat.get("g1", "entity"), cat.get("g2", "fact")
    assert all(i.startswith("g1:e") for i in ent.ids) and all(i.startswith("g2:f") for i in fact.ids)
    assert "Alice:" in ent.texts[0]
    assert len(cat.get("g3", "fact")) == 0 and cat.get("g3", "fact").vector is None
    with pytest.raises(ValueError, match="unknown item type"):
        cat.get("g1", "category")


def test_catalog_damaged_cache_is_rebuilt(store, tmp_path, caplog):
    import json

    built = IndexCatalog(store, cache_dir=tmp_path / "idx").get("g1", "fact")
    [manifest] = (tmp_path / "idx").rglob("manifest.json")
    manifest.write_text("{not json")
    with caplog.at_level("WARNING", logger="mnemis.index.catalog"):
        fresh = IndexCatalog(store, cache_dir=tmp_path / "idx").get("g1", "fact")
    assert any("unreadable" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert json.loads(manifest.read_text())["fingerprint"] == built.fingerprint  # rebuilt and saved again
    assert fresh.ids == built.ids and len(fresh) == 10


def test_catalog_recipes_keep_separate_caches(store, tmp_path):
    """The paper's BM25 text (the turn itself) and the default recipe (turn x2 + date + neighbours) get
    separate cache folders; neither is ever served the other's index."""
    from mnemis.texts import BM25_RECIPE

    plain = EpisodeRecipe()
    tuned = IndexCatalog(store, cache_dir=tmp_path / "idx", recipe=BM25_RECIPE)
    paper = IndexCatalog(store, cache_dir=tmp_path / "idx", recipe=plain, bm25_params={"stem": False})
    assert tuned.settings_key() != paper.settings_key()
    a, b = tuned.get("g1", "episode"), paper.get("g1", "episode")
    assert a.fingerprint != b.fingerprint and a.texts != b.texts
    eps = store.episodes("g1")
    assert b.texts == [e.content for e in eps]
    folders = sorted(p.name for p in (tmp_path / "idx").glob("*/episode-*"))
    assert len(folders) == 2
    # a fresh catalog with either setting loads its own index from disk, with its own texts' BM25
    again = IndexCatalog(store, cache_dir=tmp_path / "idx", recipe=BM25_RECIPE).get("g1", "episode")
    assert again.fingerprint == a.fingerprint
    assert again.bm25.search(["puppy"], 3)[1] == a.bm25.search(["puppy"], 3)[1]
    back = IndexCatalog(store, cache_dir=tmp_path / "idx", recipe=plain, bm25_params={"stem": False})
    assert back.get("g1", "episode").fingerprint == b.fingerprint
