from __future__ import annotations

import sqlite3
from datetime import datetime

import numpy as np
import pytest

from mnemis.store import GraphStore, StoreError
from mnemis.types import Category, CategoryEdge, Entity, Episode, Fact, Mention, Question, entity_id, fact_id

T0 = datetime(2023, 5, 8, 13, 56)


def _group(g: str, n: int = 3):
    eps = [
        Episode(id=Episode.make_id(g, f"D1:{i + 1}"), group_id=g, source_id=f"D1:{i + 1}", name=f"Text 1-{i}",
                speaker="Ann", content=f"Ann: message {i} of {g}", valid_at=T0, session=1, turn=i, position=i)
        for i in range(n)
    ]
    ents = [Entity(id=entity_id(g, name), group_id=g, name=name) for name in ("Ann", "Bob")]
    facts = [Fact(id=fact_id(g, eps[0].id, 0), group_id=g, source_id=ents[0].id, target_id=ents[1].id,
                  relation="KNOWS", fact="Ann knows Bob", valid_at=T0, episode_ids=[eps[0].id])]
    ments = [Mention(group_id=g, episode_id=eps[0].id, entity_id=e.id) for e in ents]
    cats = [Category(id=f"cat-{g}", group_id=g, name="Speaker", layer=1)]
    edges = [CategoryEdge(group_id=g, parent_id=cats[0].id, child_id=e.id) for e in ents]
    qs = [Question(id=f"{g}:q0", group_id=g, question="who?", answer="Ann", category="single-hop", evidence=[eps[0].id])]
    return eps, ents, facts, ments, cats, edges, qs


def _fill(store: GraphStore, g: str):
    eps, ents, facts, ments, cats, edges, qs = _group(g)
    store.upsert_episodes(eps)
    store.upsert_entities(ents)
    store.upsert_facts(facts)
    store.add_mentions(ments)
    store.replace_hierarchy(g, cats, edges)
    store.upsert_questions(qs)
    store.put_embeddings(g, "episode", [e.id for e in eps], np.eye(len(eps), 4, dtype=np.float32))
    return eps, ents, facts


def test_every_query_is_group_isolated(tmp_path):
    """Each read returns exactly the group's own rows. Mentions and category edges are built by the store
    with the *requested* group id, so their group field proves nothing: compare the returned pairs instead.
    Both groups use the same names and texts; only the ids (which embed the group) differ."""
    store = GraphStore(tmp_path / "m.sqlite")
    _fill(store, "A")
    _fill(store, "B")
    assert store.groups() == ["A", "B"]
    want = {g: _group(g) for g in ("A", "B")}
    every_ent = [e.id for g in want for e in want[g][1]]
    every_ep = [e.id for g in want for e in want[g][0]]
    for g, (eps, ents, facts, ments, cats, edges, qs) in want.items():
        assert [e.id for e in store.episodes(g)] == [e.id for e in eps]
        assert [e.id for e in store.entities(g)] == [e.id for e in ents]
        assert [f.id for f in store.facts(g)] == [f.id for f in facts]
        assert [f.id for f in store.facts_touching(g, every_ent)] == [f.id for f in facts]
        assert [q.id for q in store.questions(g)] == [q.id for q in qs]
        assert [c.id for c in store.categories(g)] == [c.id for c in cats]
        assert [c.id for c in store.categories(g, layer=1)] == [c.id for c in cats]
        pairs = {(m.episode_id, m.entity_id) for m in ments}
        assert {(m.episode_id, m.entity_id) for m in store.mentions(g)} == pairs
        assert {(m.episode_id, m.entity_id) for m in store.mentions(g, entity_ids=every_ent)} == pairs
        assert {(m.episode_id, m.entity_id) for m in store.mentions(g, episode_ids=every_ep)} == pairs
        assert {(e.parent_id, e.child_id) for e in store.category_edges(g)} == {(e.parent_id, e.child_id)
                                                                                 for e in edges}
        # asking for the other group's ids by id returns nothing
        other = want["B" if g == "A" else "A"]
        assert store.episodes(g, ids=[e.id for e in other[0]]) == []
        assert store.mentions(g, entity_ids=[e.id for e in other[1]]) == []
        ids, vecs = store.embeddings(g, "episode")
        assert ids == [e.id for e in eps] and vecs.shape == (3, 4)
        assert store.counts(g) == {"episodes": 3, "entities": 2, "facts": 1, "mentions": 2, "categories": 1,
                                   "category_edges": 2, "questions": 1}


def test_upserts_are_idempotent(tmp_path):
    store = GraphStore(tmp_path / "m.sqlite")
    _fill(store, "A")
    before = store.counts("A")
    _fill(store, "A")
    assert store.counts("A") == before
    ent = store.entities("A")[0]
    store.upsert_entities([ent.model_copy(update={"summary": "updated"})])
    assert store.entities("A")[0].summary == "updated" and store.counts("A") == before
    assert [e.name for e in store.entities("A")] == ["Ann", "Bob"]  # order kept on update


def test_reopen_keeps_data(tmp_path):
    path = tmp_path / "m.sqlite"
    with GraphStore(path) as s:
        _fill(s, "A")
    with GraphStore(path) as s:
        assert s.counts("A")["facts"] == 1


def test_schema_mismatch_is_clear_and_leaves_data(tmp_path):
    path = tmp_path / "m.sqlite"
    with GraphStore(path) as s:
        _fill(s, "A")
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="schema version 0"):
        GraphStore(path)
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM episodes").fetchone()[0] == 3
    con.close()


def test_foreign_sqlite_file_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE x (a)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not a mnemis store"):
        GraphStore(path)


def test_failed_batch_rolls_back(tmp_path):
    store = GraphStore(tmp_path / "m.sqlite")
    eps, *_ = _group("A")
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.upsert_episodes(eps)
            raise RuntimeError("killed mid-batch")
    assert store.episodes("A") == []


def test_embeddings_reject_nan_and_shape(tmp_path):
    store = GraphStore(tmp_path / "m.sqlite")
    bad = np.ones((2, 3), dtype=np.float32)
    bad[1, 0] = np.nan
    with pytest.raises(StoreError, match="not finite .*first: b"):
        store.put_embeddings("A", "fact", ["a", "b"], bad)
    with pytest.raises(StoreError, match="2 ids"):
        store.put_embeddings("A", "fact", ["a", "b"], np.ones((3, 3)))
    assert store.embeddings("A", "fact")[0] == []
    store.put_embeddings("A", "fact", ["a", "b"], np.ones((2, 3)))
    store.put_embeddings("A", "fact", ["b"], np.zeros((1, 3)))
    ids, vecs = store.embeddings("A", "fact")
    assert ids == ["a", "b"] and vecs[1].sum() == 0


def test_replace_hierarchy_replaces(tmp_path):
    store = GraphStore(tmp_path / "m.sqlite")
    _fill(store, "A")
    new = [Category(id="c2", group_id="A", name="People", layer=1)]
    store.replace_hierarchy("A", new, [CategoryEdge(group_id="A", parent_id="c2", child_id="x")])
    assert [c.id for c in store.categories("A")] == ["c2"] and len(store.category_edges("A")) == 1
    with pytest.raises(StoreError, match="group 'B'"):
        store.replace_hierarchy("A", [Category(id="c3", group_id="B", name="X", layer=1)], [])


def test_progress(tmp_path):
    store = GraphStore(tmp_path / "m.sqlite")
    store.mark_done("extract", "A", ["e1", "e2"])
    store.mark_done("extract", "A", ["e2"])
    assert store.done("extract", "A") == {"e1", "e2"} and store.done("extract", "B") == set()


def test_batched_upserts_keep_insertion_order_across_calls_and_groups(tmp_path):
    """Positions are assigned per group in insertion order, one max() per group and call (a 1M-fact batch
    once took quadratic time); a repeated id keeps its first position."""
    def fact(g: str, i: int) -> Fact:
        return Fact(group_id=g, id=f"f{i}", source_id="a", target_id="b", relation="R", fact=f"fact {i}")

    with GraphStore(tmp_path / "s.db") as store:
        store.upsert_facts([fact("g1", i) for i in range(3)] + [fact("g2", 9)] + [fact("g1", 3)])
        store.upsert_facts([fact("g1", 1), fact("g1", 4), fact("g2", 8)])
        assert [f.id for f in store.facts("g1")] == ["f0", "f1", "f2", "f3", "f4"]
        assert [f.id for f in store.facts("g2")] == ["f9", "f8"]


def test_embeddings_keep_insertion_order_across_calls_and_replacements(tmp_path):
    vec = lambda x: np.full((1, 3), x, dtype=np.float32)  # noqa: E731
    with GraphStore(tmp_path / "s.db") as store:
        store.put_embeddings("g", "fact", ["a", "b"], np.vstack([vec(1), vec(2)]))
        store.put_embeddings("g", "fact", ["c", "a", "d"], np.vstack([vec(3), vec(9), vec(4)]))
        store.put_embeddings("g", "entity_name", ["x"], vec(5))
        ids, arr = store.embeddings("g", "fact")
        assert ids == ["a", "b", "c", "d"] and arr[0, 0] == 9  # a replaced in place, new ids appended
        assert store.embeddings("g", "entity_name")[0] == ["x"]
