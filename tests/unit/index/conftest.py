"""Fixtures for index and System-1 tests: a small multi-group store embedded with the hashing embedder."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from mnemis.models.embed import HashingEmbedder
from mnemis.types import Entity, Episode, Fact

TOPICS = [
    "adopted a golden retriever puppy named Max",
    "went hiking in the mountains near Denver",
    "started painting watercolor landscapes",
    "is training for the Boston marathon",
    "moved to a new apartment downtown",
    "joined a pottery class on Tuesdays",
    "visited grandparents in Ohio for Thanksgiving",
    "bought a vintage guitar at a flea market",
]


def make_episodes(group_id: str, speakers: tuple[str, str], n: int, topic_shift: int = 0) -> list[Episode]:
    start = datetime(2023, 5, 1, 13, 0)
    out = []
    for p in range(n):
        session, turn = p // 4 + 1, p % 4 + 1
        speaker = speakers[p % 2]
        topic = TOPICS[(p + topic_shift) % len(TOPICS)]
        out.append(Episode(
            group_id=group_id, id=Episode.make_id(group_id, f"D{session}:{turn}"), source_id=f"D{session}:{turn}",
            name=f"{group_id}-{p}", speaker=speaker, content=f"{speaker}: I {topic} ({group_id} turn {p})",
            valid_at=start + timedelta(days=7 * session, seconds=30 * turn), session=session, turn=turn, position=p,
        ))
    return out


def populate(store, group_id: str, speakers: tuple[str, str], n: int, shift: int = 0, graph: bool = True) -> None:
    eps = make_episodes(group_id, speakers, n, shift)
    store.upsert_episodes(eps)
    if not graph:
        return
    ents = [Entity(group_id=group_id, id=f"{group_id}:e{i}", name=name, summary=f"{name} {TOPICS[(i + shift) % 8]}")
            for i, name in enumerate([*speakers, "Max", "Denver", "Boston", "Ohio"])]
    store.upsert_entities(ents)
    facts = [Fact(group_id=group_id, id=f"{group_id}:f{i}", source_id=ents[i % 2].id, target_id=ents[2 + i % 4].id,
                  relation="RELATED_TO", fact=f"{speakers[i % 2]} {TOPICS[(i + shift) % 8]}", episode_ids=[eps[i].id])
             for i in range(min(n, 10))]
    store.upsert_facts(facts)


@pytest.fixture
def embedder() -> HashingEmbedder:
    return HashingEmbedder(dim=64)


@pytest.fixture
def store(tmp_path, embedder):
    """Three groups (two with entities and facts, one episodes-only), every item embedded."""
    from mnemis.ingest.embed_items import embed_missing
    from mnemis.store.sqlite import GraphStore

    st = GraphStore(tmp_path / "mem.sqlite")
    populate(st, "g1", ("Alice", "Bob"), 24)
    populate(st, "g2", ("Carol", "Dan"), 16, shift=3)
    populate(st, "g3", ("Erin", "Frank"), 8, shift=5, graph=False)
    embed_missing(st, embedder, kinds=("episode", "entity_summary", "fact"))
    yield st
    st.close()


@pytest.fixture
def helpers():
    """The builders above, for tests that need custom stores (conftest modules are not importable)."""
    return make_episodes, populate
