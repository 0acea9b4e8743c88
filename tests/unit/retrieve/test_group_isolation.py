"""Group isolation on every read path, property-tested.

Four groups share entity names, category names, episode texts and fact texts (so every search scores the
groups' items alike); only the ids and one per-group marker differ: each group lives in its own year, which
shows in every rendered episode, fact, memory and relation line, and entity / category summaries name that
year. Two group ids (``g:1`` and ``g_1``) even map to the same sanitised cache-folder prefix. For random
batches of questions over mixed groups, no hit id and no rendered line may come from another group on:
System-1 (every route, every index backend), System-2 (walk, shortcut subtrees, one-hop expansion), fusion
(every mode and scorer), context rendering, RAG, full context, Mem0 and Mem0g search.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemis.baselines.full_context import full_context
from mnemis.baselines.mem0.graph import relation_line, render_relations, search_graph
from mnemis.baselines.mem0.pipeline import group_messages, store_layout
from mnemis.baselines.mem0.search import memory_line, render_memories, search_memories
from mnemis.baselines.mem0.store import Mem0Store, Memory
from mnemis.baselines.rag import rag_contexts
from mnemis.ingest.embed_items import embed_missing
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.prompts.select_nodes import SELECT_NODES
from mnemis.render import format_episode
from mnemis.retrieve.context import format_item, render_context
from mnemis.retrieve.fuse import Fuser
from mnemis.retrieve.system1 import System1
from mnemis.retrieve.system2 import System2
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
    fact_id,
)
from tests.helpers.system2 import OverlapReranker, prompt_candidates, prompt_query

GROUPS = ("g:1", "g_1", "conv-26", "bare")  # "bare" has episodes and memories only: no graph, no hierarchy
TREE = {
    2: {"Lifestyle": ["Health", "Hobbies"], "People": ["Speaker", "Family"]},
    1: {"Health": ["gastritis", "yoga"], "Hobbies": ["guitar", "painting", "yoga"], "Speaker": ["Caroline"],
        "Family": ["sister"]},
}
FACTS = [("Caroline", "HAS", "gastritis", "Caroline has gastritis"),
         ("Caroline", "PRACTICES", "yoga", "Caroline practices yoga every morning"),
         ("Caroline", "PLAYS", "guitar", "Caroline plays guitar in a band"),
         ("sister", "LIKES", "painting", "Caroline's sister likes painting")]
EPISODES = [("Caroline", "I was diagnosed with gastritis last week.", ["Caroline", "gastritis"]),
            ("Caroline", "Yoga helps me relax after work.", ["Caroline", "yoga"]),
            ("Melanie", "Your guitar solo was great!", ["guitar"]),
            ("Caroline", "My sister paints landscapes.", ["sister", "painting"]),
            ("Melanie", "I went hiking with my sister.", ["sister"])]
MEMORIES = ["Caroline has gastritis", "Caroline plays guitar", "Melanie likes hiking", "Caroline's sister paints"]
WORDS = ["Caroline", "Melanie", "sister", "guitar", "yoga", "gastritis", "painting", "hiking", "health", "play",
         "what", "does", "who", "when"]


def _t0(g: str) -> datetime:
    return datetime(2021 + GROUPS.index(g), 5, 8, 13, 56)  # the group's marker: its year


class World:
    """The shared-name store, the Mem0 store, every group's ids per kind and every line it may render."""

    def __init__(self, root) -> None:
        self.store = GraphStore(root / "mem.sqlite")
        self.mem0 = Mem0Store(root / "mem0.sqlite")
        self.emb = HashingEmbedder(dim=64)
        self.ids: dict[str, dict[str, set[str]]] = {}
        self.lines: dict[str, set[str]] = {}
        self.episodes: list[Episode] = []
        for g in GROUPS:
            self._add(g)
        msgs = group_messages(self.episodes)  # Mem0 stores: one per group, or one per (group, speaker)
        self.layouts = {"flat": store_layout(msgs, False), "per_speaker": store_layout(msgs, True)}
        for g in GROUPS:
            for ref in [r for layout in self.layouts.values() for r in layout[g]]:
                self._memories(g, ref.key)
        embed_missing(self.store, self.emb, kinds=("episode", "entity_name", "entity_summary", "fact"))
        # the fixture itself must make groups distinguishable: no id and no line shared
        for a in GROUPS:
            for b in GROUPS:
                if a < b:
                    assert not self.lines[a] & self.lines[b]
                    assert not set().union(*self.ids[a].values()) & set().union(*self.ids[b].values())

    def _add(self, g: str) -> None:
        t0, year = _t0(g), _t0(g).year
        eps = [Episode(group_id=g, id=Episode.make_id(g, f"D1:{n + 1}"), source_id=f"D1:{n + 1}", name=f"e{n}",
                       speaker=spk, content=text, valid_at=t0 + timedelta(hours=n), session=1, turn=n, position=n)
               for n, (spk, text, _) in enumerate(EPISODES)]
        self.store.upsert_episodes(eps)
        self.episodes += eps
        ids = {"episode": {e.id for e in eps}, "memory": set(), "entity": set(), "category": set(), "fact": set()}
        lines = {format_episode(e) for e in eps}
        if g != "bare":
            names = sorted({c for cats in TREE[1].values() for c in cats} | {"Melanie"})
            ents = [Entity(group_id=g, id=entity_id(g, n), name=n, tags=[n.split()[0].lower()],
                           summary=f"{n} appears in the chat of {year}.", is_speaker=n in ("Caroline", "Melanie"))
                    for n in names]
            self.store.upsert_entities(ents)
            self.store.add_mentions([Mention(group_id=g, episode_id=eps[n].id, entity_id=entity_id(g, m))
                                     for n, (_, _, ms) in enumerate(EPISODES) for m in ms])
            facts = [Fact(group_id=g, id=fact_id(g, eps[n].id, 0), source_id=entity_id(g, s), target_id=entity_id(g, t),
                          relation=r, fact=text, valid_at=t0 + timedelta(days=n + 1), episode_ids=[eps[n].id])
                     for n, (s, r, t, text) in enumerate(FACTS)]
            self.store.upsert_facts(facts)
            cats, edges = [], []
            for layer, table in TREE.items():
                for name, children in table.items():
                    cid = category_id(g, layer, name)
                    cats.append(Category(group_id=g, id=cid, name=name, layer=layer, tags=[name.lower()],
                                         summary=f"{name} topics of {year}."))
                    edges += [CategoryEdge(group_id=g, parent_id=cid,
                                           child_id=category_id(g, layer - 1, ch) if layer > 1 else entity_id(g, ch))
                              for ch in children]
            self.store.replace_hierarchy(g, cats, edges)
            by_id = {e.id: e for e in ents}
            ids.update(entity={e.id for e in ents}, category={c.id for c in cats}, fact={f.id for f in facts})
            nodes = [*ents, *cats, *facts]
            lines |= {format_item(x) for x in nodes} | {f"- {format_item(x)}" for x in nodes}
            lines |= {relation_line(f, by_id) for f in facts}
        self.ids[g], self.lines[g] = ids, lines

    def _memories(self, g: str, key: str) -> None:
        """The same memory texts in every store; ids and timestamps (the group's year) differ."""
        t0 = _t0(g)
        eps = [e for e in self.episodes if e.group_id == g]
        mems = [Memory(key, f"mem_{hashlib.sha1(f'{key}/{n}'.encode()).hexdigest()[:10]}", text, t0,
                       t0 + timedelta(days=n), False, [eps[n].id], np.asarray(self.emb.encode([text])[0], np.float32))
                for n, text in enumerate(MEMORIES)]
        self.mem0.put_memories(mems)
        self.ids[g]["memory"] |= {m.id for m in mems}
        self.lines[g] |= {memory_line(m) for m in mems}

    # ------------------------------------------------------------------ checks
    def check_hits(self, ctx, g: str, where: str) -> None:
        assert ctx.group_id == g, where
        for field, kinds in (("episodes", ("episode",)), ("entities", ("entity", "category")),
                             ("facts", ("fact", "memory"))):
            own = set().union(*(self.ids[g][k] for k in kinds))
            for h in getattr(ctx, field):
                assert h.id in own, f"{where}: {field} hit {h.id!r} is not of group {g!r}"

    def check_text(self, text: str, g: str, where: str, *, skip=("## ", "Memories", "Relations", "(none)")) -> None:
        for line in text.splitlines():
            if line and not line.startswith(skip):
                assert line in self.lines[g], f"{where}: line {line!r} is not of group {g!r}"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("iso"))
    yield w
    w.store.close()
    w.mem0.close()


def _pick(query: str, name: str, mod: int) -> bool:
    return int(hashlib.sha1(f"{query}|{name}".encode()).hexdigest(), 16) % mod == 0


def respond(req):
    """Selection: a pseudo-random half of the shown names (a fifth with take_all_children); Mem0g query
    entities: the capitalised words of the question."""
    if req.stage == SELECT_NODES.stage:
        q = prompt_query(req)
        return {"selections": [{"id": c["id"], "name": c["name"], "take_all_children": _pick(q, c["name"], 5)}
                               for c in prompt_candidates(req) if _pick(q, c["name"], 2)]}
    if req.stage == "mem0g_query_entities":
        text = next(m["content"] for m in req.messages if m["role"] == "user")
        return {"names": [w for w in WORDS if w[0].isupper() and w in text]}
    raise AssertionError(f"unexpected stage {req.stage}")


questions = st.lists(
    st.tuples(st.sampled_from(GROUPS), st.lists(st.sampled_from(WORDS), min_size=1, max_size=5)),
    min_size=1, max_size=6,
).map(lambda rows: [Question(group_id=g, id=f"{g}#q{n}", question=" ".join(ws) + "?", answer="", category="1")
                    for n, (g, ws) in enumerate(rows)])
PROPERTY = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
INDEXES = {"exact": {}, "faiss_flat": {"use_gpu": False}, "faiss_hnsw": {}, "faiss_ivf": {"nlist": 2, "nprobe": 2}}
_S1: dict[tuple, System1] = {}


def system1(world, index: str, route: str, cache_dir) -> System1:
    key = (id(world), index, route)
    if key not in _S1:  # one per backend and route: the cached indexes are what a leak would go through
        _S1[key] = System1(world.store, world.emb, k=2, routes=route, index=index, index_params=INDEXES[index],
                           cache_dir=str(cache_dir))
    return _S1[key]


@pytest.mark.parametrize("index", list(INDEXES))
@PROPERTY
@given(qs=questions)
def test_system1_every_route_and_index(world, index, qs, tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / f"s1-{index}"
    for route in ("both", "rag", "graph"):
        for q, ctx in zip(qs, system1(world, index, route, cache).search(qs)):
            world.check_hits(ctx, q.group_id, f"system1 {index}/{route}")
            if route == "graph" and q.group_id != "bare":
                assert ctx.entities and not ctx.episodes  # the check above saw real hits


@PROPERTY
@given(qs=questions)
def test_system2_fusion_and_rendering(world, qs):
    llm = LLM(ScriptedBackend(respond))
    s2 = System2(world.store, llm, max_items_per_type=50).select(qs)
    s1 = system1(world, "exact", "both", world.store.path.parent / "s1-fuse").search(qs)
    for q, r in zip(qs, s2):
        world.check_hits(r.context, q.group_id, "system2")
        assert r.traversal.group_id == q.group_id
        assert (q.group_id == "bare") == (r.traversal.fallback == "no_hierarchy")
    for mode in ("system1", "system2", "both"):
        for scorer in ("rrf", "reranker"):
            fused = Fuser(world.store, OverlapReranker(), k=3, mode=mode, scorer=scorer).fuse(qs, s1, s2)
            for q, ctx in zip(qs, fused):
                world.check_hits(ctx, q.group_id, f"fusion {mode}/{scorer}")
            for q, rendered in zip(qs, render_context(world.store, fused, max_tokens=None)):
                world.check_text(rendered.text, q.group_id, f"render {mode}/{scorer}")
                assert rendered.dropped == 0  # every fused id was found in its own group


@PROPERTY
@given(qs=questions)
def test_rag_and_full_context(world, qs):
    texts, hits = rag_contexts(world.store, world.emb, qs, k=3, cache_dir=None)
    for q, text, ctx in zip(qs, texts, hits):
        world.check_hits(ctx, q.group_id, "rag")
        world.check_text(text, q.group_id, "rag")
        assert len(text.splitlines()) == 3
    full = full_context(world.episodes, qs, max_model_len=4096, reserve=512)
    for q, text in zip(qs, full.contexts):
        world.check_text(text, q.group_id, "full context")
        assert len(text.splitlines()) == len(EPISODES)


@PROPERTY
@given(qs=questions)
def test_mem0_and_mem0g_search(world, qs):
    for name, layout in world.layouts.items():
        found = search_memories(world.mem0, world.emb, qs, layout, k=3)
        for q, ctx, text in zip(qs, found, render_memories(world.mem0, found, layout)):
            world.check_hits(ctx, q.group_id, f"mem0 {name}")
            world.check_text(text, q.group_id, f"mem0 {name} render")
            assert len(ctx.facts) == 3 * len(layout[q.group_id])  # k from each of the group's stores
    llm = LLM(ScriptedBackend(respond))
    for q, hits in zip(qs, search_graph(world.store, llm, world.emb, qs, k=3, min_similarity=-1.0)):
        own = world.ids[q.group_id]["fact"]
        assert all(h.id in own for h in hits), f"mem0g hit from another group than {q.group_id!r}"
        assert bool(hits) == (q.group_id != "bare")
        world.check_text(render_relations(world.store, q.group_id, hits), q.group_id, "mem0g render")
