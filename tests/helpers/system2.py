"""Shared by the System-2 / fusion tests (not a test file): a hand-built two-group hierarchy and a
rule-based selection responder that reads the rendered prompts back."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import numpy as np

from mnemis.models.llm.base import LLMRequest
from mnemis.store.sqlite import GraphStore
from mnemis.types import Category, CategoryEdge, Entity, Episode, Fact, Mention, category_id, entity_id

T0 = datetime(2023, 5, 8, 13, 56)

# group -> {layer -> {category name -> children names}}; layer-1 children are entity names
TREES = {
    "g1": {
        2: {"Lifestyle": ["Health", "Hobbies"], "People": ["Speaker", "Family"]},
        1: {"Health": ["gastritis", "yoga"], "Hobbies": ["guitar", "painting", "yoga"],
            "Speaker": ["Caroline"], "Family": ["sister"]},
    },
    "g2": {
        2: {"Work": ["Projects", "Colleagues"], "Travel": ["Trips"]},
        1: {"Projects": ["database migration"], "Colleagues": ["Bob"], "Trips": ["Paris", "Tokyo"]},
    },
}
# group -> (source, relation, target, fact text, days after T0)
FACTS = {
    "g1": [("Caroline", "HAS", "gastritis", "Caroline has gastritis", 1),
           ("Caroline", "PRACTICES", "yoga", "Caroline practices yoga every morning", 2),
           ("Caroline", "PLAYS", "guitar", "Caroline plays guitar in a band", 3),
           ("sister", "LIKES", "painting", "Caroline's sister likes painting", 4)],
    "g2": [("Bob", "WORKS_ON", "database migration", "Bob works on the database migration", 1),
           ("Bob", "VISITED", "Paris", "Bob visited Paris in June", 2)],
}
# group -> (speaker, text, entity names mentioned)
EPISODES = {
    "g1": [("Caroline", "I was diagnosed with gastritis last week.", ["Caroline", "gastritis"]),
           ("Caroline", "Yoga helps me relax.", ["Caroline", "yoga"]),
           ("Melanie", "Your guitar solo was great!", ["guitar"]),
           ("Caroline", "My sister paints landscapes.", ["sister", "painting"])],
    "g2": [("Bob", "The database migration finished.", ["Bob", "database migration"]),
           ("Bob", "Paris was lovely.", ["Bob", "Paris"]),
           ("Alice", "Tokyo next year?", ["Tokyo"])],
}


def ep_id(group: str, n: int) -> str:
    return Episode.make_id(group, f"D1:{n + 1}")


def build_store(path, groups=("g1", "g2")) -> GraphStore:
    store = GraphStore(path)
    for g in groups:
        tree = TREES[g]
        names = {c for cats in tree[1].values() for c in cats}
        store.upsert_entities([Entity(group_id=g, id=entity_id(g, n), name=n, tags=[n.split()[0].lower()],
                                      summary=f"{n} appears in the chat.", is_speaker=n in ("Caroline", "Bob"))
                               for n in sorted(names)])
        eps = []
        for n, (spk, text, _) in enumerate(EPISODES[g]):
            eps.append(Episode(group_id=g, id=ep_id(g, n), source_id=f"D1:{n + 1}", name=f"e{n}", speaker=spk,
                               content=text, valid_at=T0 + timedelta(hours=n), session=1, turn=n, position=n))
        store.upsert_episodes(eps)
        store.add_mentions([Mention(group_id=g, episode_id=ep_id(g, n), entity_id=entity_id(g, m))
                            for n, (_, _, ms) in enumerate(EPISODES[g]) for m in ms])
        store.upsert_facts([Fact(group_id=g, id=f"{g}_f{n}", source_id=entity_id(g, s), target_id=entity_id(g, t),
                                 relation=r, fact=text, valid_at=T0 + timedelta(days=d), episode_ids=[ep_id(g, n)])
                            for n, (s, r, t, text, d) in enumerate(FACTS[g])])
        cats, edges = [], []
        for layer, table in tree.items():
            for name, children in table.items():
                cid = category_id(g, layer, name)
                cats.append(Category(group_id=g, id=cid, name=name, layer=layer, tags=[name.lower()]))
                for ch in children:
                    child = category_id(g, layer - 1, ch) if layer > 1 else entity_id(g, ch)
                    edges.append(CategoryEdge(group_id=g, parent_id=cid, child_id=child))
        store.replace_hierarchy(g, cats, edges)
    return store


def cid(group: str, layer: int, name: str) -> str:
    return category_id(group, layer, name)


def eid(group: str, name: str) -> str:
    return entity_id(group, name)


def released(req: LLMRequest) -> bool:
    """Whether a selection prompt is in the released form (the query first, store ids as ``uuid``)."""
    return "User query:" in _user(req)


def prompt_candidates(req: LLMRequest) -> list[dict]:
    """The candidate objects of a selection prompt, in order; the released form's ``uuid`` / ``tag`` are
    also given as ``id`` / ``tags``."""
    body = _user(req).split("Available nodes:\n", 1)[1].split("\n\nQuery:", 1)[0]
    out = [json.loads(line) for line in body.splitlines() if line.strip()]
    for c in out:
        if "uuid" in c:
            c.setdefault("id", c["uuid"])
            c.setdefault("tags", c.get("tag", []))
    return out


def prompt_query(req: LLMRequest) -> str:
    text = _user(req)
    if released(req):
        return text.split('User query:\n"', 1)[1].split('"\n', 1)[0]
    return text.split('Query: "', 1)[1].split('"\n', 1)[0]


def _user(req: LLMRequest) -> str:
    """The selection prompt's user message (retries append more messages after it)."""
    return next(m["content"] for m in req.messages if "Available nodes:" in m["content"])


def selector(
    plan: Mapping[str, Mapping[str, object]], *, fail: Callable[[str], bool] = lambda q: False,
    extra: Callable[[str], list[dict]] = lambda q: [],
) -> Callable[[LLMRequest], object]:
    """Responder: for query ``q``, select listed nodes whose name is in ``plan[q]`` (value True = also
    ``take_all_children``); ``fail(q)`` raises; ``extra(q)`` adds raw selections (e.g. invented ids)."""

    def respond(req: LLMRequest) -> object:
        q = prompt_query(req)
        if fail(q):
            raise RuntimeError("scripted failure")
        chosen = plan.get(q, {})
        flag, key = ("get_all_children", "uuid") if released(req) else ("take_all_children", "id")
        sels = [{key: c["id"], "name": c["name"], flag: bool(chosen[c["name"]])}
                for c in prompt_candidates(req) if c["name"] in chosen]
        return {"selections": sels + extra(q)}

    return respond


class OverlapReranker:
    """Scores a document by the share of query words it contains; records every call."""

    model_id = "overlap"

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []

    def score(self, query, documents):
        qs = [query] * len(documents) if isinstance(query, str) else list(query)
        self.calls.append((qs, list(documents)))
        out = []
        for q, d in zip(qs, documents):
            qw = set(q.lower().replace("?", "").split())
            out.append(len(qw & set(d.lower().replace(".", " ").replace(":", " ").split())) / max(len(qw), 1))
        return np.asarray(out, dtype=np.float32)
