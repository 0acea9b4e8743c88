"""Mem0g as published: typed entity nodes, bare (source, relation, destination) triples, node reuse by
embedding threshold, soft invalidation, dual retrieval; with a scripted LLM and the hashing embedder."""

from __future__ import annotations

import re

from mnemis.baselines.mem0.pipeline import Mem0Config, run_mem0
from mnemis.baselines.mem0.store import Mem0Store
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.base import LLMRequest
from mnemis.types import Dataset, Question
from tests.helpers.mem0 import Decider, block, episodes, make_llm, stages, text_of

_CITY = re.compile(r"live in ([A-Z][a-z]+)")
_NUM = re.compile(r"^(\d+)\. (.*)$")


def own_lines(req: LLMRequest) -> list[str]:
    """NEW MESSAGES lines, only the memory owner's when the prompt names one."""
    who = re.search(r"writing the memory of (\w+):", text_of(req))
    return [ln for ln in block(req, "NEW MESSAGES") if not who or f"] {who.group(1)}: " in ln]


def graph_responder(req: LLMRequest):
    """Entities: speakers (``person``) and cities (``city``); relations: ``X lives_in City`` for "I live in
    City" said by X; conflicts: every stored ``lives_in`` of the same person (plus a bogus number)."""
    body = text_of(req)
    if req.stage == "mem0g_entities":
        out = []
        for ln in own_lines(req):
            speaker, text = ln.split("] ", 1)[1].split(": ", 1)
            city = _CITY.search(text)
            out += [{"name": speaker, "type": "Person"}] + ([{"name": city.group(1), "type": "city"}] if city else [])
        return {"entities": out}
    if req.stage == "mem0g_query_entities":
        q = body.split("QUESTION:\n", 1)[1].split("\n", 1)[0]
        return {"entities": [{"name": w, "type": "person"} for w in re.findall(r"\b[A-Z][a-z]+\b", q)
                             if w not in {"Where", "What"}]}
    if req.stage == "mem0g_relations":
        rels = []
        for ln in own_lines(req):
            speaker, text = ln.split("] ", 1)[1].split(": ", 1)
            if city := _CITY.search(text):
                rels.append({"source": speaker, "relation": "Lives In", "destination": city.group(1)})
        return {"relations": rels}
    if req.stage == "mem0g_conflicts":
        stored = [m.group(2) for ln in block(req, "Stored relations:") if (m := _NUM.match(ln))]
        new = block(req, "New relations")
        return {"obsolete": [i for i, t in enumerate(stored) if " lives in " in t and any(
            n[2:].split(" lives in ")[0] == t.split(" lives in ")[0] for n in new if " lives in " in n)] + [99]}
    return Decider()(req)


TURNS = [("Caroline", "I live in Boston"), ("Melanie", "Nice"), ("Caroline", "Now I live in Austin"),
         ("Melanie", "I live in Paris")]
QS = [Question(group_id="g", id="g:q", question="Where does Caroline live?", answer="Austin", category="single-hop")]


def test_typed_nodes_bare_triples_and_soft_invalidation(tmp_path):
    llm, backend = make_llm(graph_responder)
    data = Dataset(name="t", groups=["g"], episodes=episodes("g", TURNS), questions=QS)
    run = run_mem0(data, llm, HashingEmbedder(), Mem0Config(graph=True, k=2, summary_every=0, pair_size=1), tmp_path)
    store = Mem0Store(tmp_path / "mem0.sqlite")
    nodes = {n.name: n for n in store.nodes("g")}
    assert {(n, x.type) for n, x in nodes.items()} == {("Caroline", "person"), ("Boston", "city"),
                                                       ("Austin", "city"), ("Melanie", "person"), ("Paris", "city")}
    rels = {(r.relation, nodes_by_id[r.target_id]) : r for r in store.relations("g")
            for nodes_by_id in [{n.id: n.name for n in nodes.values()}]}
    assert set(rels) == {("lives_in", "Boston"), ("lives_in", "Austin"), ("lives_in", "Paris")}
    assert rels[("lives_in", "Boston")].invalid_at == rels[("lives_in", "Austin")].created_at  # kept, marked
    assert rels[("lives_in", "Austin")].invalid_at is None and rels[("lives_in", "Paris")].invalid_at is None
    assert not (tmp_path / "mem0g.sqlite").exists()  # no Graphiti-style graph
    totals = run.stats["counters"]["g"]
    assert totals["graph.invalidated"] == 1 and totals["bad.graph_conflict_id"] >= 1  # the bogus 99
    assert totals["graph.nodes_added"] == 5  # "Caroline" reused (cosine 1 >= 0.9), not re-added
    assert run.stats["graph"]["counts"]["g"] == {"nodes": 5, "relations": 3, "invalid": 1}
    ctx = run.contexts[0]
    assert ctx.startswith("Memories:\n[2023/05/08 (Mon) 13:0")
    relations = ctx.split("\n\nRelations:\n")[1].splitlines()
    assert "Caroline -- lives_in -- Austin" in relations and "Caroline -- lives_in -- Boston [no longer true]" in relations
    assert all(" -- " in ln and "(valid" not in ln for ln in relations)  # bare triples, no dates or sentences
    # graph stages batched per step; conflicts asked only when stored relations touch the new ones
    names = [s for s, _ in stages(backend)]
    assert names.count("mem0g_conflicts") == 1 and names.count("mem0g_query_entities") == 1


def test_graph_per_speaker_store_and_rendering(tmp_path):
    llm, _ = make_llm(graph_responder)
    data = Dataset(name="t", groups=["g"], episodes=episodes("g", TURNS), questions=QS)
    run = run_mem0(data, llm, HashingEmbedder(), Mem0Config(graph=True, per_speaker=True, k=2, summary_every=0),
                   tmp_path)
    store = Mem0Store(tmp_path / "mem0.sqlite")
    assert {n.name for n in store.nodes("g::Caroline")} >= {"Caroline", "Boston", "Austin"}
    assert "Paris" not in {n.name for n in store.nodes("g::Caroline")}
    sections = [s.splitlines()[0] for s in run.contexts[0].split("\n\n")]
    assert sections == ["Memories for Caroline:", "Relations for Caroline:", "Memories for Melanie:",
                        "Relations for Melanie:"]
    assert "Melanie -- lives_in -- Paris" in run.contexts[0]


def test_graph_include_invalid_false_hides_obsolete(tmp_path):
    llm, _ = make_llm(graph_responder)
    data = Dataset(name="t", groups=["g"], episodes=episodes("g", TURNS), questions=QS)
    cfg = Mem0Config(graph=True, k=0, summary_every=0, pair_size=1, graph_include_invalid=False)
    run = run_mem0(data, llm, HashingEmbedder(), cfg, tmp_path)
    assert "Boston" not in run.contexts[0].split("Relations:")[1] and "Austin" in run.contexts[0]
    # no memory retrieved (k = 0): the evidence is the relations' own messages, the obsolete one's excluded
    ret = run.retrieved[0]
    assert all(h.id.startswith("rel_") for h in ret.facts)
    assert "g:D1:3" in {e.id for e in ret.episodes} and "g:D1:1" not in {e.id for e in ret.episodes}
