"""The ``graphiti`` Mem0g ablation (``graph_kind: graphiti``): a richer graph than Mem0g as published
(:mod:`mnemis.baselines.mem0.triples`), one per conversation.

Construction reuses the base-graph stages of :mod:`mnemis.ingest` unchanged (entity extraction with
the speaker rule, typed relations as triples with validity times, entity resolution, and the
contradiction check that marks an older relation invalid - ``invalid_at``/``expired_at`` set, never
deleted), run by :class:`~mnemis.ingest.pipeline.BaseGraphBuilder` into the baseline's own graph file
with Mem0g's settings: no reflection rounds, no entity summaries, only name and relation embeddings.
Its LLM stages are tagged ``mem0g_<stage>`` in the ledger (the response cache is shared: identical
prompts from a Mnemis build of the same slice are replayed, not paid twice).

Retrieval fuses (RRF) two lists of relations per question: entity-centric (the question's entities,
extracted with the same entity prompt, matched to stored entities by name embedding, then the relations
touching them, ranked by similarity to the question) and triple-level semantic search (the question
embedding against every relation sentence).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from mnemis.index.rrf import rrf
from mnemis.models.llm.base import LLMRequest, LLMResult, Sampling
from mnemis.prompts.extract_entities import EXTRACT_ENTITIES
from mnemis.store.sqlite import GraphStore
from mnemis.types import Episode, Fact, Hit, Question, normalize_name

STAGE_PREFIX = "mem0g_"
_EPOCH = datetime(2000, 1, 1)


class StagePrefixedLLM:
    """Wraps an LLM client so every request's ``stage`` gets ``prefix`` (own ledger rows, same cache keys)."""

    def __init__(self, llm: Any, prefix: str = STAGE_PREFIX) -> None:
        self.llm, self.prefix = llm, prefix

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        return self.llm.generate([r.model_copy(update={"stage": self.prefix + r.stage}) for r in requests])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)


def build_graph(episodes: Sequence[Episode], llm: Any, embedder: Any, path: str | Path, *, context_window: int = 3,
                max_candidates: int = 10, temperature: float = 0.0) -> tuple[GraphStore, dict[str, Any]]:
    """Build (or resume) the Mem0g graph of ``episodes`` in ``path``; returns the store and build stats."""
    from mnemis.ingest.pipeline import BaseGraphBuilder

    store = GraphStore(path)
    builder = BaseGraphBuilder(
        store, StagePrefixedLLM(llm), embedder, context_window=context_window, entity_reflection_rounds=0,
        fact_reflection_rounds=0, max_candidates=max_candidates, attribute_min_new_mentions=10**9,
        temperature=temperature, embed_kinds=("entity_name", "fact"), show_progress=False,
    )
    stats = builder.ingest(list(episodes))
    return store, stats.to_dict()


def query_entities(questions: Sequence[Question], llm: Any, *, max_tokens: int = 128,
                   temperature: float = 0.0) -> list[list[str]]:
    """Entity names of each question, by the base-graph entity prompt (one ``generate``); [] on failure."""
    renders = []
    for q in questions:
        ep = Episode(group_id=q.group_id, id=f"{q.group_id}:question:{q.id}", source_id=q.id, name="question",
                     speaker="", content=q.question, valid_at=q.question_date or _EPOCH, session=0, turn=0,
                     position=0)
        renders.append(EXTRACT_ENTITIES.render(ep, []))
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
    reqs = [LLMRequest(messages=m, schema=EXTRACT_ENTITIES.schema, sampling=sampling,
                       stage=f"{STAGE_PREFIX}query_entities") for m in renders]
    results = llm.generate(reqs) if reqs else []
    out = []
    for res in results:
        names = getattr(res.parsed, "names", None) if res.ok else None
        out.append([" ".join(str(n).split()) for n in (names or []) if str(n).strip()])
    return out


class _GroupGraph:
    """One group's entities and relations with their embeddings (loaded once per search)."""

    def __init__(self, store: GraphStore, group_id: str) -> None:
        self.entities = {e.id: e for e in store.entities(group_id)}
        self.facts: dict[str, Fact] = {f.id: f for f in store.facts(group_id)}
        self.ent_ids, self.ent_mat = store.embeddings(group_id, "entity_name")
        fact_ids, fact_mat = store.embeddings(group_id, "fact")
        keep = [i for i, fid in enumerate(fact_ids) if fid in self.facts]
        self.fact_ids = [fact_ids[i] for i in keep]
        self.fact_mat = fact_mat[keep] if keep else np.zeros((0, 1), dtype=np.float32)
        self.by_name = {normalize_name(e.name): e.id for e in self.entities.values()}
        self.touching: dict[str, list[str]] = {}
        for f in self.facts.values():
            for end in {f.source_id, f.target_id}:
                self.touching.setdefault(end, []).append(f.id)


def search_graph(
    store: GraphStore,
    llm: Any,
    embedder: Any,
    questions: Sequence[Question],
    *,
    k: int = 10,
    entity_k: int = 5,
    min_similarity: float = 0.5,
    include_invalid: bool = True,
    max_tokens: int = 128,
    temperature: float = 0.0,
) -> list[list[Hit]]:
    """Top-``k`` relations per question (RRF of entity-centric and triple-level lists)."""
    if not questions:
        return []
    names = query_entities(questions, llm, max_tokens=max_tokens, temperature=temperature)
    qvecs = embedder.encode([q.question for q in questions], kind="query")
    flat = [n for ns in names for n in ns]
    nvecs = embedder.encode(flat) if flat else None
    graphs: dict[str, _GroupGraph] = {}
    out, row = [], 0
    for q, qv, ns in zip(questions, qvecs, names):
        g = graphs.get(q.group_id) or graphs.setdefault(q.group_id, _GroupGraph(store, q.group_id))
        ok = [i for i, fid in enumerate(g.fact_ids) if include_invalid or g.facts[fid].expired_at is None]
        if not ok:
            row += len(ns)
            out.append([])
            continue
        sims = g.fact_mat[ok] @ np.asarray(qv, dtype=np.float32)
        fact_sim = {g.fact_ids[i]: float(s) for i, s in zip(ok, sims)}
        triple = sorted(fact_sim, key=lambda f: -fact_sim[f])[:k]
        seeds: dict[str, float] = {}
        for n in ns:
            exact = g.by_name.get(normalize_name(n))
            if exact is not None:
                seeds[exact] = 1.0
            if nvecs is not None and g.ent_ids:
                es = g.ent_mat @ nvecs[row]
                for j in np.argsort(-es, kind="stable")[:entity_k]:
                    if es[j] >= min_similarity:
                        seeds[g.ent_ids[j]] = max(seeds.get(g.ent_ids[j], 0.0), float(es[j]))
            row += 1
        around = dict.fromkeys(f for e in seeds for f in g.touching.get(e, []) if f in fact_sim)
        centric = sorted(around, key=lambda f: -fact_sim[f])[:k]
        fused = rrf({"entity": (centric, [fact_sim[f] for f in centric]),
                     "triple": (triple, [fact_sim[f] for f in triple])}, limit=k)
        out.append([Hit(id=i, kind="fact", score=s, scores=p) for i, s, p in zip(fused.ids, fused.scores, fused.parts)])
    return out


def relation_line(f: Fact, entities: dict[str, Any]) -> str:
    """``Caroline -[MOVED_TO]-> Boston: fact (valid 2023-05-08 - now)``; ``invalid`` marks ended ones."""
    def name(eid: str) -> str:
        e = entities.get(eid)
        return e.name if e is not None else "?"

    start = f.valid_at.strftime("%Y-%m-%d") if f.valid_at else "?"
    end = f.invalid_at.strftime("%Y-%m-%d") if f.invalid_at else ("?" if f.expired_at else "now")
    flag = " [no longer true]" if f.expired_at is not None else ""
    return f"{name(f.source_id)} -[{f.relation}]-> {name(f.target_id)}: {f.fact} (valid {start} - {end}){flag}"


def render_relations(store: GraphStore, group_id: str, hits: Sequence[Hit]) -> str:
    """The relations of ``hits`` (best first), one line each."""
    ids = [h.id for h in hits]
    if not ids:
        return ""
    facts = {f.id: f for f in store.facts(group_id, ids)}
    ents = {e.id: e for e in store.entities(group_id, {x for f in facts.values() for x in (f.source_id, f.target_id)})}
    return "\n".join(relation_line(facts[i], ents) for i in ids if i in facts)
