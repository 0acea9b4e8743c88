"""Mem0g as the Mem0 paper describes it (arXiv 2504.19413, §2.2): a graph of typed entity nodes and
``(source, relation, destination)`` triples, built from the same message pairs as Mem0's memories.

Per step (one message pair per memory store, every store of every group batched together):

1. one ``generate`` extracts each pair's entities with their types (the node labels);
2. one ``generate`` extracts the relations between them as bare triples (no fact sentence, no dates);
3. one ``encode`` embeds the endpoint names; an endpoint reuses the store's closest node when the
   cosine is at least ``graph_node_threshold`` (0.9 by default), else it becomes a new node with its type;
4. the stored relations touching the new relations' nodes (the ``s`` most similar to the new triples)
   go with the new triples to one ``generate`` that names the obsolete ones; those get ``invalid_at``
   and stay in the graph (soft invalidation, kept for temporal questions); an exact duplicate of a
   valid relation is not added again.

Search fuses (RRF) two lists per store: entity-centric (the question's entities, from the entity prompt,
matched to stored nodes by name embedding, then the relations touching them, ranked by similarity to
the question) and triple-level semantic search (the question embedding against every triple's text).
Everything bad in a reply (an empty name, an endpoint missing, an obsolete number not shown) is dropped
and counted under ``graph.*`` / ``bad.graph_*``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemis.baselines.mem0.extract import ExtractJob, clip
from mnemis.baselines.mem0.search import StoreRef
from mnemis.baselines.mem0.store import Mem0Store, Node, Relation
from mnemis.index.rrf import rrf
from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.prompts.base import Prompt
from mnemis.prompts.mem0_graph import (
    MAX_NAME_CHARS,
    MEM0G_CONFLICTS,
    MEM0G_ENTITIES,
    MEM0G_QUERY_ENTITIES,
    MEM0G_RELATIONS,
)
from mnemis.types import Hit, Question, stable_id

_NON_WORD = re.compile(r"[^0-9a-z]+")


def relation_name(text: Any) -> str:
    """``Lives In`` -> ``lives_in`` (lower-case snake case; "" when nothing is left)."""
    return _NON_WORD.sub("_", str(text or "").strip().lower()).strip("_")[:40]


def entity_name(text: Any) -> str:
    return clip(" ".join(str(text or "").split()), MAX_NAME_CHARS)[0]


def triple_text(src: str, relation: str, dst: str) -> str:
    return f"{src} {relation.replace('_', ' ')} {dst}"


@dataclass
class GraphChange:
    """What one step adds: new nodes, new relations and invalidated ones (written by :meth:`TripleGraph.commit`)."""

    nodes: list[Node] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)


class _StoreGraph:
    """One store's nodes and relations in memory (loaded once, kept current by the steps)."""

    def __init__(self, store: Mem0Store, key: str) -> None:
        self.key = key
        self.nodes: dict[str, Node] = {n.id: n for n in store.nodes(key)}
        self.relations: dict[str, Relation] = {r.id: r for r in store.relations(key)}

    def match(self, vec: np.ndarray, threshold: float) -> str | None:
        """The node closest to ``vec`` when its cosine reaches ``threshold``."""
        if not self.nodes:
            return None
        ids = list(self.nodes)
        sims = np.stack([self.nodes[i].vec for i in ids]) @ vec
        j = int(np.argmax(sims))
        return ids[j] if sims[j] >= threshold else None

    def text(self, r: Relation) -> str:
        return triple_text(self.nodes[r.source_id].name, r.relation, self.nodes[r.target_id].name)

    def line(self, r: Relation) -> str:
        """``Caroline -- lives_in -- Boston`` (``[no longer true]`` once invalidated)."""
        flag = " [no longer true]" if r.invalid_at is not None else ""
        return f"{self.nodes[r.source_id].name} -- {r.relation} -- {self.nodes[r.target_id].name}{flag}"


class TripleGraph:
    """Mem0g's graph over the stores of a :class:`Mem0Store` (see the module docstring)."""

    def __init__(self, store: Mem0Store, llm: Any, embedder: Any, cfg: Any) -> None:
        self.store, self.llm, self.embedder, self.cfg = store, llm, embedder, cfg
        self._graphs: dict[str, _StoreGraph] = {}

    def graph(self, key: str) -> _StoreGraph:
        if key not in self._graphs:
            self._graphs[key] = _StoreGraph(self.store, key)
        return self._graphs[key]

    def _generate(self, prompt: Prompt, renders: Sequence[list[dict[str, str]]], budget: str) -> list[Any]:
        if not renders:
            return []
        sampling = Sampling(temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens[budget])
        return self.llm.generate([LLMRequest(messages=r, schema=prompt.schema, sampling=sampling, stage=prompt.stage)
                                  for r in renders])

    # ------------------------------------------------------------------ build
    def step(self, jobs: Sequence[ExtractJob], counters: dict[str, Counter]) -> GraphChange:
        """Entities, relations, node matching and invalidation for one pair per store (module docstring)."""
        jobs = [j for j in jobs if any(m.content.strip() and (j.speaker is None or m.speaker == j.speaker)
                                       for m in j.pair.messages)]
        change = GraphChange()
        typed: list[dict[str, tuple[str, str]]] = []
        for j, res in zip(jobs, self._generate(MEM0G_ENTITIES, [MEM0G_ENTITIES.render(j.pair.messages, j.speaker)
                                                                for j in jobs], "mem0g_entities")):
            c = counters.setdefault(j.store, Counter())
            found: dict[str, tuple[str, str]] = {}
            if not res.ok or res.parsed is None:
                c["bad.graph_entities_failed"] += 1
            else:
                for e in res.parsed.entities:
                    name = entity_name(e.name)
                    if name and any(ch.isalnum() for ch in name):
                        found.setdefault(name.casefold(), (name, relation_name(e.type) or "entity"))
                    else:
                        c["graph.skipped_entity"] += 1
            c["graph.entities"] += len(found)
            typed.append(found)
        todo = [i for i, f in enumerate(typed) if f]
        rel_res = self._generate(MEM0G_RELATIONS, [MEM0G_RELATIONS.render(jobs[i].pair.messages,
                                                                          [n for n, _ in typed[i].values()],
                                                                          jobs[i].speaker) for i in todo],
                                 "mem0g_relations")
        triples: dict[int, list[tuple[str, str, str]]] = {}
        for i, res in zip(todo, rel_res):
            c = counters[jobs[i].store]
            if not res.ok or res.parsed is None:
                c["bad.graph_relations_failed"] += 1
                continue
            for t in res.parsed.relations:
                src, rel, dst = entity_name(t.source), relation_name(t.relation), entity_name(t.destination)
                if not (src and rel and dst) or src.casefold() == dst.casefold():
                    c["graph.skipped_relation"] += 1
                    continue
                triples.setdefault(i, []).append((src, rel, dst))
        names = list(dict.fromkeys(n for ts in triples.values() for s, _, d in ts for n in (s, d)))
        vec_of = dict(zip(names, self.embedder.encode(names))) if names else {}
        new_rels: list[tuple[int, Relation, str]] = []
        for i, ts in triples.items():
            job, g, c = jobs[i], self.graph(jobs[i].store), counters[jobs[i].store]
            ids = {}
            for n in dict.fromkeys(x for s, _, d in ts for x in (s, d)):
                nid = g.match(np.asarray(vec_of[n], dtype=np.float32), self.cfg.graph_node_threshold)
                if nid is None:
                    typ = typed[i].get(n.casefold(), (n, "entity"))[1]
                    c["graph.untyped_endpoint"] += int(n.casefold() not in typed[i])
                    node = Node(job.store, stable_id("node", job.store, n.casefold()), n, typ,
                                np.asarray(vec_of[n], dtype=np.float32))
                    if node.id in g.nodes:  # same name, embedding below the threshold: a new id
                        node.id = stable_id("node", job.store, n.casefold(), job.pair.id)
                    g.nodes[node.id] = node
                    change.nodes.append(node)
                    c["graph.nodes_added"] += 1
                    nid = node.id
                ids[n] = nid
            valid = {(r.source_id, r.relation, r.target_id) for r in g.relations.values() if r.invalid_at is None}
            for k, (s, rel, d) in enumerate(ts):
                key = (ids[s], rel, ids[d])
                if key in valid:
                    c["graph.duplicate_relation"] += 1
                    continue
                valid.add(key)
                r = Relation(job.store, stable_id("rel", job.store, job.pair.id, str(k)), ids[s], rel, ids[d],
                             job.pair.time, None, [e.id for e in job.pair.messages], np.zeros(0, dtype=np.float32))
                new_rels.append((i, r, g.text(r)))
        if new_rels:
            for (_, r, _), v in zip(new_rels, self.embedder.encode([t for _, _, t in new_rels])):
                r.vec = np.asarray(v, dtype=np.float32)
        self._invalidate(jobs, new_rels, counters, change)
        for i, r, _ in new_rels:
            self.graph(r.group_id).relations[r.id] = r
            change.relations.append(r)
            counters[jobs[i].store]["graph.relations_added"] += 1
        return change

    def _invalidate(self, jobs: Sequence[ExtractJob], new_rels: Sequence[tuple[int, Relation, str]],
                    counters: dict[str, Counter], change: GraphChange) -> None:
        """One ``generate``: which valid stored relations around the new ones are obsolete (soft)."""
        by_job: dict[int, list[tuple[Relation, str]]] = {}
        for i, r, t in new_rels:
            by_job.setdefault(i, []).append((r, t))
        asks, shown_lists = [], []
        for i, rels in by_job.items():
            g = self.graph(jobs[i].store)
            ends = {x for r, _ in rels for x in (r.source_id, r.target_id)}
            cands = [r for r in g.relations.values() if r.invalid_at is None and (r.source_id in ends or r.target_id in ends)]
            if not cands:
                continue
            new_mat = np.stack([r.vec for r, _ in rels])
            score = (np.stack([r.vec for r in cands]) @ new_mat.T).max(axis=1)
            shown = [cands[j] for j in np.argsort(-score, kind="stable")[:max(self.cfg.s, 1)]]
            asks.append(i)
            shown_lists.append(shown)
        renders = [MEM0G_CONFLICTS.render([self.graph(jobs[i].store).text(r) for r in shown],
                                          [t for _, t in by_job[i]], jobs[i].pair.time.strftime("%Y-%m-%d"))
                   for i, shown in zip(asks, shown_lists)]
        for i, shown, res in zip(asks, shown_lists, self._generate(MEM0G_CONFLICTS, renders, "mem0g_conflicts")):
            c = counters[jobs[i].store]
            if not res.ok or res.parsed is None:
                c["bad.graph_conflicts_failed"] += 1
                continue
            for n in dict.fromkeys(res.parsed.obsolete):
                if not 0 <= n < len(shown):
                    c["bad.graph_conflict_id"] += 1
                    continue
                shown[n].invalid_at = jobs[i].pair.time
                change.relations.append(shown[n])
                c["graph.invalidated"] += 1

    def commit(self, change: GraphChange) -> None:
        """Write one step's nodes and relations (call inside the step's transaction)."""
        if change.nodes:
            self.store.put_nodes(change.nodes)
        if change.relations:
            self.store.put_relations(change.relations)

    def episode_hits(self, hits: Sequence[Hit]) -> list[Hit]:
        """The source messages of relation ``hits`` (best first, each once) as episode hits."""
        rels = {rid: r for g in self._graphs.values() for rid, r in g.relations.items()}
        out: dict[str, Hit] = {}
        for h in hits:
            for e in rels[h.id].episode_ids if h.id in rels else ():
                out.setdefault(e, Hit(id=e, kind="episode", score=h.score, scores={"mem0g": h.score}))
        return list(out.values())

    def counts(self, keys: Sequence[str]) -> dict[str, int]:
        rels = [r for k in keys for r in self.graph(k).relations.values()]
        return {"nodes": sum(len(self.graph(k).nodes) for k in keys), "relations": len(rels),
                "invalid": sum(r.invalid_at is not None for r in rels)}

    # ------------------------------------------------------------------ search
    def search(self, questions: Sequence[Question], layout: Mapping[str, Sequence[StoreRef]]
               ) -> tuple[list[list[Hit]], list[dict[str, str]]]:
        """Per question: the top ``graph_k`` relations of each of its group's stores (RRF of entity-centric
        and triple search) and their rendering per store key (``""`` for a whole-group store)."""
        cfg = self.cfg
        res = self._generate(MEM0G_QUERY_ENTITIES, [MEM0G_QUERY_ENTITIES.render(q.question) for q in questions],
                             "query_entities")
        names = [[entity_name(e.name) for e in r.parsed.entities if entity_name(e.name)]
                 if r.ok and r.parsed is not None else [] for r in res]
        qvecs = self.embedder.encode([q.question for q in questions], kind="query") if questions else []
        flat = [n for ns in names for n in ns]
        nvecs = self.embedder.encode(flat) if flat else np.zeros((0, 1), dtype=np.float32)
        hits_out, extra_out, row = [], [], 0
        for q, qv, ns in zip(questions, qvecs, names):
            nv, row = nvecs[row:row + len(ns)], row + len(ns)
            hits, extra = [], {}
            for ref in layout.get(q.group_id, ()):
                g = self.graph(ref.key)
                rels = [r for r in g.relations.values() if cfg.graph_include_invalid or r.invalid_at is None]
                picked: list[Relation] = []
                if rels:
                    sims = np.stack([r.vec for r in rels]) @ np.asarray(qv, dtype=np.float32)
                    sim = {r.id: float(s) for r, s in zip(rels, sims)}
                    triple = sorted(sim, key=lambda x: -sim[x])[:cfg.graph_k]
                    seeds: set[str] = set()
                    if g.nodes and len(nv):
                        ids = list(g.nodes)
                        es = np.stack([g.nodes[i].vec for i in ids]) @ nv.T
                        for col in range(es.shape[1]):
                            for j in np.argsort(-es[:, col], kind="stable")[:cfg.graph_entity_k]:
                                if es[j, col] >= cfg.graph_min_similarity:
                                    seeds.add(ids[j])
                    around = [r.id for r in rels if r.source_id in seeds or r.target_id in seeds]
                    centric = sorted(around, key=lambda x: -sim[x])[:cfg.graph_k]
                    fused = rrf({"entity": (centric, [sim[x] for x in centric]),
                                 "triple": (triple, [sim[x] for x in triple])}, limit=cfg.graph_k)
                    hits += [Hit(id=i, kind="fact", score=s, scores=p) for i, s, p in zip(fused.ids, fused.scores,
                                                                                          fused.parts)]
                    picked = [g.relations[i] for i in fused.ids]
                extra[ref.key if ref.speaker else ""] = "\n".join(g.line(r) for r in picked)
            hits_out.append(hits)
            extra_out.append(extra)
        return hits_out, extra_out
