"""System-2 output sizes: uncut in mode=paper (every item of a shortcut subtree reaches the fuser), and
ranked-then-cut when caps are configured (no item type or kind dropped by walk position)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mnemis.config import compose, to_plain
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.retrieve.expand import ExpandCaps, cap_nodes, expand_one_hop, merge_ranked
from mnemis.retrieve.fuse import Fuser
from mnemis.retrieve.system2 import System2, System2Config
from mnemis.store.sqlite import GraphStore
from mnemis.types import (
    Category,
    CategoryEdge,
    Entity,
    Episode,
    Fact,
    Mention,
    Question,
    category_id,
    entity_id,
)
from tests.helpers.system2 import T0, OverlapReranker, selector

G = "w"
SPEAKER = "Caroline"
TOPICS, PER_TOPIC, N_EPISODES = 25, 8, 300
SPECIAL = {13: "violin", 150: "marathon"}  # entity index -> name sharing a word with the queries below


def ent_name(n: int) -> str:
    return SPECIAL.get(n, f"thing{n}")


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> GraphStore:
    """Root "Everything" (layer 2) over 25 topics + Speaker (layer 1) over 200 entities + the speaker.
    Each entity has 2 facts with the speaker (400 facts); 300 episodes of the speaker each mention her
    and one entity."""
    store = GraphStore(tmp_path_factory.mktemp("wide") / "m.db")
    n_ent = TOPICS * PER_TOPIC
    spk = entity_id(G, SPEAKER)
    ents = [Entity(group_id=G, id=entity_id(G, ent_name(n)), name=ent_name(n), summary=f"{ent_name(n)} item")
            for n in range(n_ent)]
    store.upsert_entities([*ents, Entity(group_id=G, id=spk, name=SPEAKER, is_speaker=True)])
    store.upsert_facts([Fact(group_id=G, id=f"f{n}_{j}", source_id=spk, target_id=ents[n].id, relation="R",
                             fact=f"{SPEAKER} {'plays' if j else 'owns'} the {ent_name(n)}", valid_at=T0)
                        for n in range(n_ent) for j in range(2)])
    eps = [Episode(group_id=G, id=f"{G}:D{n}", source_id=f"D{n}", name=f"e{n}", speaker=SPEAKER,
                   content=f"I talked about {ent_name(n % n_ent)} today.", valid_at=T0 + timedelta(minutes=n),
                   session=1 + n // 100, turn=n % 100, position=n) for n in range(N_EPISODES)]
    store.upsert_episodes(eps)
    store.add_mentions([Mention(group_id=G, episode_id=e.id, entity_id=x) for n, e in enumerate(eps)
                        for x in (spk, ents[n % n_ent].id)])
    root = category_id(G, 2, "Everything")
    cats = [Category(group_id=G, id=root, name="Everything", layer=2)]
    edges = []
    for t in range(TOPICS + 1):
        name = "Speaker" if t == TOPICS else f"Topic {t}"
        c = category_id(G, 1, name)
        cats.append(Category(group_id=G, id=c, name=name, layer=1, tags=[name.lower()]))
        edges.append(CategoryEdge(group_id=G, parent_id=root, child_id=c))
        members = [spk] if t == TOPICS else [ents[t * PER_TOPIC + i].id for i in range(PER_TOPIC)]
        edges += [CategoryEdge(group_id=G, parent_id=c, child_id=m) for m in members]
    store.replace_hierarchy(G, cats, edges)
    yield store
    store.close()


def q(text: str) -> Question:
    return Question(group_id=G, id="w-q0", question=text, answer="", category="1")


def paper_system2_keys() -> dict:
    cfg = to_plain(compose(["mode=paper"]))
    return {k: v for k, v in cfg["retrieval"]["system2"].items() if k != "enabled"}


def select(store: GraphStore, text: str, **cfg):
    llm = LLM(ScriptedBackend(selector({text: {"Everything": True}})), max_retries=0)
    [res] = System2(store, llm, **cfg).select([q(text)])
    return res


def test_paper_mode_hands_every_item_of_a_shortcut_subtree_to_the_fuser(wide):
    text = "Which violin does Caroline play?"
    keys = paper_system2_keys()
    assert {keys[k] for k in ("max_facts_per_entity", "max_episodes_per_entity", "max_neighbours_per_entity",
                              "max_items_per_type")} == {None}
    res = select(wide, text, **keys)
    kinds = [h.kind for h in res.context.entities]
    assert kinds.count("entity") == TOPICS * PER_TOPIC + 1 and kinds.count("category") == TOPICS + 2
    assert len(res.context.facts) == 2 * TOPICS * PER_TOPIC and len(res.context.episodes) == N_EPISODES
    reranker = OverlapReranker()
    [out] = Fuser(wide, reranker, k=10, mode="system2").fuse([q(text)], None, [res])
    [(queries, docs)] = reranker.calls
    assert len(docs) == (TOPICS * PER_TOPIC + 1) + (TOPICS + 2) + 2 * TOPICS * PER_TOPIC + N_EPISODES
    assert (len(out.episodes), len(out.entities), len(out.facts)) == (10, 20, 20)  # the reranker cut
    assert any(h.id == entity_id(G, "violin") for h in out.entities)


def test_capped_node_list_keeps_the_top_scored_and_both_kinds(wide):
    text = "Which violin does Caroline play at the marathon?"
    res = select(wide, text, max_items_per_type=100)
    ids = [h.id for h in res.context.entities]
    kinds = [h.kind for h in res.context.entities]
    assert len(ids) == 100 and len(set(ids)) == 100
    # the nodes sharing a query word are kept although the breadth-first walk lists them late
    assert {entity_id(G, "violin"), entity_id(G, "marathon"), entity_id(G, SPEAKER)} <= set(ids)
    # categories (27 of 228 nodes) do not crowd out entities, and are not dropped wholesale either
    assert kinds.count("entity") >= 85 and kinds.count("category") >= 10
    # facts and episodes: ranked across entities, the query's matches first
    facts = [h.id for h in res.context.facts]
    assert len(facts) == 100 and {"f13_0", "f13_1", "f150_0", "f150_1"} <= set(facts)
    eps = [h.id for h in res.context.episodes]
    assert len(eps) == 100 and {f"{G}:D13", f"{G}:D150", f"{G}:D213"} <= set(eps)


def test_walk_order_no_longer_decides_which_entities_survive(wide):
    """A query matching nothing: the cut keeps kinds in proportion, not the first 100 walk positions."""
    res = select(wide, "zzz?", max_items_per_type=50)
    kinds = [h.kind for h in res.context.entities]
    assert len(kinds) == 50
    assert kinds.count("category") == pytest.approx(50 * 27 / 228, abs=1)


def test_merge_ranked_best_first_ties_shared():
    a = [("a1", 2), ("a2", 0), ("a3", 0), ("a4", 0)]
    b = [("b1", 1), ("b2", 0)]
    assert merge_ranked([a, b], 4) == ["a1", "b1", "a2", "b2"]
    assert merge_ranked([a, b], None) == ["a1", "b1", "a2", "b2", "a3", "a4"]
    assert merge_ranked([[("x", 0), ("y", 0)], [("x", 0), ("z", 0)]], 3) == ["x", "z", "y"]  # no repeats
    big = [(f"e{i}", 0) for i in range(9)]
    small = [("c0", 0), ("c1", 0), ("c2", 0)]
    got = merge_ranked([big, small], 4, proportional=True)
    assert sum(x.startswith("c") for x in got) == 1  # 3 of 12 -> a quarter of 4


def test_cap_nodes_none_keeps_everything_in_order():
    nodes = ["c1", "e1", "e2"]
    assert cap_nodes("q", nodes, {}, {"c1": "category"}, set(), None) == nodes
    assert cap_nodes("q", nodes, {}, {"c1": "category"}, set(), 5) == nodes
    got = cap_nodes("the guitar", nodes, {"e2": "guitar"}, {"c1": "category"}, {"e1"}, 1)
    assert got == ["e2"]


def test_uncapped_expansion_skips_the_word_ranking(wide):
    ents = [entity_id(G, "violin")]
    [(facts, eps, nbs)] = expand_one_hop(wide, G, ["anything"], [ents], ExpandCaps())
    assert sorted(facts) == ["f13_0", "f13_1"] and nbs == [entity_id(G, SPEAKER)]
    assert sorted(eps) == sorted([f"{G}:D13", f"{G}:D213"])
    [(facts1, _, _)] = expand_one_hop(wide, G, ["plays"], [ents], ExpandCaps(facts=1))
    assert facts1 == ["f13_1"]  # the fact sharing "plays" with the query


def test_config_null_means_no_cap():
    cfg = System2Config(max_facts_per_entity=None, max_items_per_type=None)
    assert cfg.max_facts_per_entity is None and cfg.max_items_per_type is None
    with pytest.raises(ValueError):
        System2Config(max_items_per_type=0)
