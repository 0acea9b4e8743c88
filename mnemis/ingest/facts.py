"""Fact resolution, one step at a time (the paper): dedup and contradiction.

A step takes the next pending episode of every group. Each extracted fact is mapped to resolved
entities (facts between unknown entities or that became self-loops after a merge are skipped and
counted). A fact repeating an existing live fact word for word between the same entities is merged
without the LLM. Otherwise candidates are the live facts between the same pair plus facts touching
either entity that are semantically close; an episode with candidates gets one ``dedup_facts`` request,
all episodes of the step in one ``generate``. Duplicates merge by appending the episode id; a
contradicted older fact gets ``invalid_at = new.valid_at`` and ``expired_at = now``, where "now" is the
time the memory learned it (the episode's time, so a rerun reproduces the graph exactly). Nothing is deleted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from mnemis.ingest.common import bump_stats, round_robin, run_prompt
from mnemis.ingest.extract import EpisodeExtraction
from mnemis.models.protocols import Embedder
from mnemis.prompts.dedup_facts import DEDUP_FACTS, decisions_schema
from mnemis.prompts.limits import DEFAULT_LIMITS, PromptLimits
from mnemis.store.sqlite import GraphStore
from mnemis.times import like
from mnemis.types import Episode, Fact, fact_id, normalize_name

DATE_FORMATS = {"day": "%Y-%m-%d", "datetime": "%Y-%m-%dT%H:%M:%S"}


def render_fact(f: Fact, dates: str = "day") -> str:
    """A fact with its validity period, as the dedup prompt shows it (``dates``: day | datetime)."""
    fmt = DATE_FORMATS[dates]
    start = f.valid_at.strftime(fmt) if f.valid_at else "?"
    end = f.invalid_at.strftime(fmt) if f.invalid_at else "now"
    return f"{f.fact} ({start} - {end})"


class GroupFacts:
    """One group's facts as dedup sees them: by endpoint, with their fact-sentence vectors."""

    def __init__(self, store: GraphStore, group_id: str, embedder: Embedder) -> None:
        self.group_id = group_id
        self.facts: dict[str, Fact] = {f.id: f for f in store.facts(group_id)}
        self.by_entity: dict[str, list[str]] = defaultdict(list)
        for f in self.facts.values():
            self._index(f)
        stored_ids, stored = store.embeddings(group_id, "fact")
        if stored_ids and stored.shape[1] != embedder.dim:
            stored_ids = []
        row = {i: r for r, i in enumerate(stored_ids)}
        missing = [i for i in self.facts if i not in row]
        extra = dict(zip(missing, embedder.encode([self.facts[i].fact for i in missing]))) if missing else {}
        self.vec: dict[str, np.ndarray] = {i: (stored[row[i]] if i in row else extra[i]) for i in self.facts}

    def _index(self, f: Fact) -> None:
        self.by_entity[f.source_id].append(f.id)
        if f.target_id != f.source_id:
            self.by_entity[f.target_id].append(f.id)

    def add(self, f: Fact, vec: np.ndarray) -> None:
        self.facts[f.id] = f
        self.vec[f.id] = np.asarray(vec, dtype=np.float32)
        self._index(f)

    def live_touching(self, source: str, target: str) -> list[Fact]:
        ids = dict.fromkeys(self.by_entity.get(source, []) + self.by_entity.get(target, []))
        return [self.facts[i] for i in ids if self.facts[i].expired_at is None]

    def candidates(self, source: str, target: str, vec: np.ndarray, k: int,
                   min_similarity: float, *, per_item: bool = True) -> list[str]:
        """Candidates for a new fact between ``source`` and ``target`` with sentence vector ``vec``.

        ``per_item`` (Graphiti): the ``k`` live facts between the same pair most similar to it
        (duplicate candidates) and the ``k`` most similar live facts touching either entity (at least
        ``min_similarity``; contradiction candidates), so up to ``2k``. Otherwise: the pair's facts
        newest first, then close facts touching either entity, ``k`` in all.
        """
        touching = self.live_touching(source, target)
        pair = [f.id for f in reversed(touching) if {f.source_id, f.target_id} == {source, target}]
        sim = {f.id: float(self.vec[f.id] @ vec) for f in touching}
        in_pair = set(pair)
        others = sorted((f.id for f in touching if f.id not in in_pair), key=lambda i: -sim[i])
        close = [i for i in others if sim[i] >= min_similarity]
        if not per_item:
            return (pair + close)[:k]
        return sorted(pair, key=lambda i: -sim[i])[:k] + close[:k]


@dataclass
class FactsOutcome:
    group_id: str
    episode_id: str
    new_facts: list[Fact] = field(default_factory=list)
    new_vecs: list[np.ndarray] = field(default_factory=list)
    updated: dict[str, Fact] = field(default_factory=dict)


def _build_facts(state: GroupFacts, ep: Episode, ext: EpisodeExtraction, resolved: Sequence[str | None],
                 stats: Counter) -> list[Fact]:
    out: list[Fact] = []
    seen: set[tuple[str, str, str]] = set()
    for idx, rec in enumerate(ext.facts):
        ends = [resolved[i] if 0 <= i < len(resolved) else None for i in (rec.source, rec.target)]
        if ends[0] is None or ends[1] is None:
            stats["skip.fact_unknown_entity"] += 1
            continue
        if ends[0] == ends[1]:
            stats["skip.fact_self_loop"] += 1
            continue
        key = (ends[0], ends[1], normalize_name(rec.fact))
        if key in seen:
            stats["facts.duplicate_in_episode"] += 1
            continue
        seen.add(key)
        # the LLM's dates are naive: next to aware message times they are read in the message's zone
        valid = like(datetime.fromisoformat(rec.valid_at), ep.valid_at) if rec.valid_at else ep.valid_at
        invalid = like(datetime.fromisoformat(rec.invalid_at), ep.valid_at) if rec.invalid_at else None
        if invalid is not None and invalid < valid:
            stats["skip.bad_date"] += 1
            invalid = None
        out.append(Fact(group_id=state.group_id, id=fact_id(state.group_id, ep.id, idx), source_id=ends[0],
                        target_id=ends[1], relation=rec.relation, fact=rec.fact, valid_at=valid,
                        invalid_at=invalid, created_at=ep.valid_at, episode_ids=[ep.id]))
    return out


def _merge(out: FactsOutcome, state: GroupFacts, old_id: str, episode_id: str) -> None:
    old = out.updated.get(old_id, state.facts[old_id])
    if episode_id not in old.episode_ids:
        old = old.model_copy(update={"episode_ids": [*old.episode_ids, episode_id]})
    out.updated[old_id] = old


def _contradict(out: FactsOutcome, state: GroupFacts, old_id: str, new: Fact, now: datetime,
                stats: Counter) -> Fact:
    """Apply "``new`` contradicts ``old_id``"; returns ``new`` (possibly ended by a newer old fact)."""
    old = out.updated.get(old_id, state.facts[old_id])
    if old.valid_at is not None and new.valid_at is not None and old.valid_at > new.valid_at:
        stats["facts.ended_by_newer"] += 1  # the stored fact is newer: the new one ended when it began
        if new.invalid_at is None or new.invalid_at > old.valid_at:
            new = new.model_copy(update={"invalid_at": old.valid_at})
        return new
    if old.invalid_at is not None and new.valid_at is not None and old.invalid_at <= new.valid_at:
        return new  # already over before the new fact began
    out.updated[old_id] = old.model_copy(update={"invalid_at": new.valid_at, "expired_at": now})
    stats["facts.invalidated"] += 1
    return new


def dedup_step(
    items: Sequence[tuple[GroupFacts, Episode, EpisodeExtraction, Sequence[str | None]]],
    llm: Any,
    embedder: Embedder,
    stats: Counter,
    *,
    max_candidates: int = 10,
    min_similarity: float = 0.5,
    max_tokens: int = 192,
    temperature: float = 0.0,
    per_item: bool = True,
    limits: PromptLimits = DEFAULT_LIMITS,
) -> list[FactsOutcome]:
    """Resolve the facts of one episode per group (``items`` must hold distinct groups).

    ``per_item``: each new fact keeps its own candidates (``GroupFacts.candidates``) and the request
    lists their union; False: the episode's facts share ``max_candidates`` slots (round-robin)."""
    built = [_build_facts(state, ep, ext, res, stats) for state, ep, ext, res in items]
    flat = [f.fact for facts in built for f in facts]
    vecs = embedder.encode(flat) if flat else np.zeros((0, embedder.dim), dtype=np.float32)
    outcomes = [FactsOutcome(state.group_id, ep.id) for state, ep, _, _ in items]
    requests, schemas, asks = [], [], []
    row = 0
    for i, ((state, ep, _, _), facts) in enumerate(zip(items, built)):
        ask, cand_lists = _candidates_of(state, ep, facts, vecs[row:row + len(facts)], outcomes[i], stats,
                                         max_candidates=max_candidates, min_similarity=min_similarity,
                                         per_item=per_item)
        row += len(facts)
        if ask:
            union = round_robin(cand_lists, None if per_item else max_candidates)
            shown = [render_fact(outcomes[i].updated.get(c, state.facts[c]), limits.fact_dates) for c in union]
            stated = ep.valid_at.strftime(DATE_FORMATS[limits.fact_dates])
            requests.append(DEDUP_FACTS.render(stated, [f.fact for f, _ in ask], shown))
            schemas.append(decisions_schema(len(ask), len(union)))
            asks.append((i, ask, union))
    replies = run_prompt(llm, DEDUP_FACTS, requests, stats, max_tokens=max_tokens, temperature=temperature,
                         schemas=schemas)
    for (i, ask, union), rep in zip(asks, replies):
        state, ep, _, _ = items[i]
        _apply_decisions(state, ep, outcomes[i], ask, union, rep, stats)
    for (state, _, _, _), out in zip(items, outcomes):
        for f in out.updated.values():
            state.facts[f.id] = f
        for f, v in zip(out.new_facts, out.new_vecs):
            state.add(f, v)
        stats["facts.new"] += len(out.new_facts)
    return outcomes


def _candidates_of(state: GroupFacts, ep: Episode, facts: Sequence[Fact], vecs: np.ndarray, out: FactsOutcome,
                   stats: Counter, *, max_candidates: int, min_similarity: float, per_item: bool,
                   ) -> tuple[list[tuple[Fact, np.ndarray]], list[list[str]]]:
    """The new facts of one episode that need the model, with their candidate lists; an exact duplicate is
    merged and a fact without candidates kept as new, without asking."""
    ask, cand_lists = [], []
    for f, vec in zip(facts, vecs):
        exact = next((o.id for o in state.live_touching(f.source_id, f.target_id)
                      if (o.source_id, o.target_id) == (f.source_id, f.target_id)
                      and normalize_name(o.fact) == normalize_name(f.fact)), None)
        if exact is not None:
            _merge(out, state, exact, ep.id)
            stats["facts.exact_duplicate"] += 1
            continue
        cands = state.candidates(f.source_id, f.target_id, vec, max_candidates, min_similarity, per_item=per_item)
        if cands:
            ask.append((f, vec))
            cand_lists.append(cands)
        else:
            out.new_facts.append(f)
            out.new_vecs.append(vec)
    return ask, cand_lists


def _apply_decisions(state: GroupFacts, ep: Episode, out: FactsOutcome, ask: list[tuple[Fact, np.ndarray]],
                     union: list[str], rep: Any, stats: Counter) -> None:
    """Per asked fact: merge it into the existing one it duplicates, or keep it new after closing the existing
    facts it contradicts (numbers checked against the lists shown, bad ones counted)."""
    decided: dict[int, Any] = {}
    for d in getattr(rep, "decisions", []) if rep is not None else []:
        if not 0 <= d.new < len(ask) or d.new in decided:
            stats["skip.dedup_bad_fact_index"] += 1
            continue
        decided[d.new] = d
    for q, (f, vec) in enumerate(ask):
        d = decided.get(q)
        dup = d.duplicate_of if d is not None else -1
        if dup != -1 and not 0 <= dup < len(union):
            stats["skip.dedup_bad_index"] += 1
            dup = -1
        if dup >= 0:
            _merge(out, state, union[dup], ep.id)
            stats["facts.duplicate"] += 1
            continue
        for c in dict.fromkeys(d.contradicts if d is not None else []):
            if not 0 <= c < len(union):
                stats["skip.dedup_bad_index"] += 1
                continue
            f = _contradict(out, state, union[c], f, ep.valid_at, stats)
        out.new_facts.append(f)
        out.new_vecs.append(vec)


def commit_facts(store: GraphStore, outcomes: Sequence[FactsOutcome], stats: Counter) -> None:
    """Write one step's facts, mark the episodes done and add ``stats``, in one transaction."""
    with store.transaction():
        for out in outcomes:
            facts = [*out.updated.values(), *out.new_facts]
            if facts:
                store.upsert_facts(facts)
            if out.new_facts:
                ids = [f.id for f in out.new_facts]
                store.put_embeddings(out.group_id, "fact", ids, np.stack(out.new_vecs))
            store.mark_done("facts", out.group_id, [out.episode_id])
        bump_stats(store, stats)
