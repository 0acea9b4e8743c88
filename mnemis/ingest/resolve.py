"""Entity resolution, one step at a time (the paper).

A step takes the next pending episode of every group. Each extracted name resolves, in order:
1. exactly (normalised name or a remembered alias of an earlier merge) - no LLM;
2. the speaker of the message, if new, becomes a new entity - no LLM (speaker rule);
3. otherwise candidates are gathered inside the group (name-embedding cosine, BM25 on names, token
   prefixes such as "Mel" / "Melanie", fused by RRF); a name without candidates is new - no LLM;
4. the rest: one ``resolve_entities`` request per episode, all episodes of the step in one ``generate``.
   With ``per_item`` (the default, as Graphiti) every name gets its own top ``max_candidates`` and the
   request shows their union; otherwise the names share ``max_candidates`` slots, filled round-robin.
A merge is remembered as an alias so the same surface form later resolves without the LLM.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemis.ingest.common import (
    ALIASES_KEY,
    RESOLVED_KEY,
    bump_stats,
    clean_name,
    message_text,
    round_robin,
    run_prompt,
)
from mnemis.ingest.extract import EpisodeExtraction
from mnemis.models.protocols import Embedder
from mnemis.prompts.limits import DEFAULT_LIMITS, PromptLimits
from mnemis.prompts.resolve_entities import RESOLVE_ENTITIES, resolutions_schema
from mnemis.store.sqlite import GraphStore
from mnemis.types import Entity, Episode, Mention, entity_id, normalize_name

_WORD = re.compile(r"\w+")


def _prefix_related(a: str, b: str) -> bool:
    """True when a token (>= 3 chars) of one name is a prefix of a token of the other."""
    ta = [t for t in _WORD.findall(a.casefold()) if len(t) >= 3]
    tb = [t for t in _WORD.findall(b.casefold()) if len(t) >= 3]
    return any(x.startswith(y) or y.startswith(x) for x in ta for y in tb)


class GroupEntities:
    """One group's entities as resolution sees them: aliases, name vectors and a BM25 index on names."""

    def __init__(self, store: GraphStore, group_id: str, embedder: Embedder) -> None:
        self.group_id = group_id
        self.entities: dict[str, Entity] = {e.id: e for e in store.entities(group_id)}
        self.merged: dict[str, str] = dict(store.get_meta(ALIASES_KEY.format(group_id), {}) or {})
        self.aliases = {normalize_name(e.name): e.id for e in self.entities.values()}
        self.aliases.update(self.merged)
        self.ids = list(self.entities)
        stored_ids, stored = store.embeddings(group_id, "entity_name")
        if stored_ids and stored.shape[1] != embedder.dim:  # another embedder wrote them: re-encode
            stored_ids = []
        row = {i: r for r, i in enumerate(stored_ids)}
        missing = [i for i in self.ids if i not in row]
        extra = {}
        if missing:
            extra = dict(zip(missing, embedder.encode([self.entities[i].name for i in missing])))
        self.vecs = np.zeros((len(self.ids), embedder.dim), dtype=np.float32)
        for r, i in enumerate(self.ids):
            self.vecs[r] = stored[row[i]] if i in row else extra[i]
        self._bm25: Any = None

    def add(self, entity: Entity, vec: np.ndarray) -> None:
        self.entities[entity.id] = entity
        self.aliases[normalize_name(entity.name)] = entity.id
        self.ids.append(entity.id)
        self.vecs = np.vstack([self.vecs, np.asarray(vec, dtype=np.float32)[None, :]])
        self._bm25 = None

    def candidates(self, name: str, vec: np.ndarray, k: int, min_similarity: float) -> list[str]:
        """Up to ``k`` existing entity ids that may denote ``name``, best first."""
        if not self.ids or k <= 0:
            return []
        from mnemis.index.bm25 import BM25Index
        from mnemis.index.rrf import rrf

        sims = self.vecs @ np.asarray(vec, dtype=np.float32)
        order = [int(j) for j in np.argsort(-sims, kind="stable")[:k] if sims[j] >= min_similarity]
        lists = {"cosine": ([self.ids[j] for j in order], [float(sims[j]) for j in order])}
        if self._bm25 is None:
            self._bm25 = BM25Index([self.entities[i].name for i in self.ids], self.ids)
        scores, ids = self._bm25.search([name], k)
        lists["bm25"] = (ids[0], [float(s) for s in scores[0]])
        pref = [i for i in self.ids if _prefix_related(name, self.entities[i].name)][:k]
        lists["prefix"] = (pref, [1.0] * len(pref))
        return rrf(lists, limit=k).ids


@dataclass
class ResolveOutcome:
    """What one episode's resolution changes: new/updated entities, mentions, the index -> id map."""

    group_id: str
    episode_id: str
    resolved: list[str | None] = field(default_factory=list)
    new_entities: list[Entity] = field(default_factory=list)
    new_vecs: list[np.ndarray] = field(default_factory=list)
    updated: list[Entity] = field(default_factory=list)
    aliases_changed: bool = False


def resolve_step(
    items: Sequence[tuple[GroupEntities, Episode, EpisodeExtraction]],
    llm: Any,
    embedder: Embedder,
    stats: Counter,
    *,
    max_candidates: int = 10,
    min_similarity: float = 0.5,
    max_tokens: int = 128,
    temperature: float = 0.0,
    per_item: bool = True,
    limits: PromptLimits = DEFAULT_LIMITS,
) -> list[ResolveOutcome]:
    """Resolve the names of one episode per group (``items`` must hold distinct groups).

    ``per_item``: each name keeps its own top ``max_candidates`` and the request lists their union;
    False: the episode's names share ``max_candidates`` candidates (round-robin over their lists)."""
    outcomes, queued = _known_names(items, embedder, stats)
    flat = [name for todo in queued for _, name in todo]
    vecs = embedder.encode(flat) if flat else np.zeros((0, embedder.dim), dtype=np.float32)
    requests, schemas, asks = [], [], []  # asks[r] = (item index, [(name index, name, vec)], candidate ids)
    row = 0
    for i, ((state, ep, _), todo) in enumerate(zip(items, queued)):
        ask, cand_lists = [], []
        for j, name in todo:
            vec = vecs[row]
            row += 1
            cands = state.candidates(name, vec, max_candidates, min_similarity)
            if cands:
                ask.append((j, name, vec))
                cand_lists.append(cands)
            else:
                outcomes[i].resolved[j] = _create(state, outcomes[i], ep, name, vec)
                stats["resolve.new_no_candidates"] += 1
        if ask:
            union = round_robin(cand_lists, None if per_item else max_candidates)
            shown = [(state.entities[c].name, state.entities[c].summary) for c in union]
            requests.append(RESOLVE_ENTITIES.render(ep.content, [n for _, n, _ in ask], shown, limits))
            schemas.append(resolutions_schema(len(ask), len(union)))
            asks.append((i, ask, union))
    replies = run_prompt(llm, RESOLVE_ENTITIES, requests, stats, max_tokens=max_tokens,
                         temperature=temperature, schemas=schemas)
    for (i, ask, union), rep in zip(asks, replies):
        state, ep, _ = items[i]
        _apply_decisions(state, ep, outcomes[i], ask, union, rep, stats)
    return outcomes


def _known_names(items: Sequence[tuple[GroupEntities, Episode, EpisodeExtraction]], embedder: Embedder,
                 stats: Counter) -> tuple[list[ResolveOutcome], list[list[tuple[int, str]]]]:
    """Per item: the outcome with every name resolved that needs no model (an alias already known, or the
    speaker, created by rule), and the ``(name index, name)`` pairs left to match against candidates."""
    outcomes: list[ResolveOutcome] = []
    queued: list[list[tuple[int, str]]] = []
    for state, ep, ext in items:
        out = ResolveOutcome(state.group_id, ep.id, [None] * len(ext.names))
        speaker = normalize_name(clean_name(ep.speaker) or "") if message_text(ep) else ""
        todo: list[tuple[int, str]] = []
        for j, name in enumerate(ext.names):
            key = normalize_name(name)
            if key in state.aliases:
                out.resolved[j] = state.aliases[key]
                stats["resolve.exact"] += 1
                if key == speaker and not state.entities[state.aliases[key]].is_speaker:
                    ent = state.entities[state.aliases[key]].model_copy(update={"is_speaker": True})
                    state.entities[ent.id] = ent
                    out.updated.append(ent)
            elif key == speaker:
                out.resolved[j] = _create(state, out, ep, name, embedder.encode([name])[0], speaker=True)
                stats["resolve.speaker_new"] += 1
            else:
                todo.append((j, name))
        outcomes.append(out)
        queued.append(todo)
    return outcomes, queued


def _apply_decisions(state: GroupEntities, ep: Episode, out: ResolveOutcome, ask: list[tuple[int, str, Any]],
                     union: list[str], rep: Any, stats: Counter) -> None:
    """Merge each asked name into the candidate the reply matched it with (numbers checked against the lists
    shown, bad ones counted), or create it as a new entity."""
    decided: dict[int, int] = {}
    for d in getattr(rep, "decisions", []) if rep is not None else []:
        if not 0 <= d.new < len(ask) or d.new in decided:
            stats["skip.resolve_bad_name_index"] += 1
            continue
        if d.match != -1 and not 0 <= d.match < len(union):
            stats["skip.resolve_bad_match_index"] += 1
            continue
        decided[d.new] = d.match
    for q, (j, name, vec) in enumerate(ask):
        match = decided.get(q, -1)
        if rep is not None and q not in decided:
            stats["resolve.no_decision"] += 1
        if match >= 0:
            eid = union[match]
            out.resolved[j] = eid
            state.aliases[normalize_name(name)] = eid
            state.merged[normalize_name(name)] = eid
            out.aliases_changed = True
            stats["resolve.merged"] += 1
        else:
            out.resolved[j] = _create(state, out, ep, name, vec)
            stats["resolve.new_after_llm"] += 1


def _create(state: GroupEntities, out: ResolveOutcome, ep: Episode, name: str, vec: np.ndarray,
            *, speaker: bool = False) -> str:
    ent = Entity(group_id=state.group_id, id=entity_id(state.group_id, name), name=name,
                 is_speaker=speaker, created_at=ep.valid_at)
    state.add(ent, vec)
    out.new_entities.append(ent)
    out.new_vecs.append(np.asarray(vec, dtype=np.float32))
    return ent.id


def commit_resolution(
    store: GraphStore, states: dict[str, GroupEntities], outcomes: Sequence[ResolveOutcome], stats: Counter
) -> None:
    """Write one step's outcomes, mark the episodes resolved and add ``stats``, in one transaction."""
    with store.transaction():
        for out in outcomes:
            g = out.group_id
            if out.new_entities or out.updated:
                store.upsert_entities([*out.new_entities, *out.updated])
            if out.new_entities:
                ids = [e.id for e in out.new_entities]
                store.put_embeddings(g, "entity_name", ids, np.stack(out.new_vecs))
            ids = list(dict.fromkeys(i for i in out.resolved if i is not None))
            store.add_mentions([Mention(group_id=g, episode_id=out.episode_id, entity_id=i) for i in ids])
            store.set_meta(RESOLVED_KEY.format(out.episode_id), out.resolved)
            if out.aliases_changed:
                store.set_meta(ALIASES_KEY.format(g), dict(sorted(states[g].merged.items())))
            store.mark_done("resolve", g, [out.episode_id])
        bump_stats(store, stats)
