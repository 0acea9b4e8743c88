"""System-1 on a real LoCoMo slice with the real MiniLM embedder (CPU, < 60 s)."""

from __future__ import annotations

import pytest

from mnemis.eval.recall import evidence_recall
from mnemis.ingest.embed_items import embed_missing
from mnemis.retrieve.system1 import System1
from mnemis.store.sqlite import GraphStore
from mnemis.texts import EpisodeRecipe

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def minilm():
    from mnemis.models.embed import SentenceTransformerEmbedder

    try:
        return SentenceTransformerEmbedder("minilm", device="cpu")
    except (ImportError, FileNotFoundError, OSError) as err:
        pytest.skip(f"MiniLM unavailable: {err}")


def test_system1_on_locomo_slice(locomo, minilm, tmp_path):
    gid = locomo.groups[0]
    episodes = [e for e in locomo.episodes_of(gid) if e.session <= 4]
    have = {e.id for e in episodes}
    questions = [q for q in locomo.questions_of(gid)
                 if q.category != "adversarial" and q.evidence and set(q.evidence) <= have]
    assert len(episodes) > 50 and len(questions) >= 10
    store = GraphStore(tmp_path / "m.sqlite")
    store.upsert_episodes(episodes)
    assert embed_missing(store, minilm, recipe=EpisodeRecipe()) == {"episode": len(episodes)}

    fused = System1(store, minilm, k=10, routes="rag").search(questions)
    bm25 = System1(store, None, k=10, routes="rag", vector=False).search(questions)
    gold, cats = [q.evidence for q in questions], [q.category for q in questions]
    r_fused = evidence_recall([[h.id for h in c.episodes] for c in fused], gold, cats)["overall"]
    r_bm25 = evidence_recall([[h.id for h in c.episodes] for c in bm25], gold, cats)["overall"]
    assert all(len(c.episodes) == 10 and not c.entities and not c.facts for c in fused)
    assert all(h.id in have for c in fused for h in c.episodes)
    # On this slice (about 1/8 of a conversation) retrieval is easy; a broken route would drop well below.
    assert r_fused["recall@10"] >= 0.7, r_fused
    assert r_fused["recall@10"] >= r_bm25["recall@10"] - 0.05
    # the index cache next to the store is reused by a fresh System1
    again = System1(store, minilm, k=10, routes="rag").search(questions[:3])
    assert [[h.id for h in c.episodes] for c in again] == [[h.id for h in c.episodes] for c in fused[:3]]
    assert (tmp_path / "m.sqlite.indexes").is_dir()
