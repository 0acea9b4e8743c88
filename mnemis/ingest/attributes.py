"""Entity summaries and tags (the paper), in one of two ways (``ingest.attribute_refresh``).

``episode`` (the paper, as Graphiti does it; ``update_step``): after each episode's entities and facts
are resolved, every entity the episode mentions gets its summary and tags rewritten from its previous
ones plus that message (with its earlier context) and the episode's facts about it. Episodes go in
order, one step per episode of every group, all of the step's entities in one ``generate``, so a
summary accumulates message by message and entity resolution of the next episode already sees it.
Summary embeddings are written once at the end (``embed_stale``): the entities touched are recorded
as stale in the same transaction as the new summary.

``end`` (``refresh_attributes``, our default): once per ``ingest`` call. An entity is due when its
mention count grew by at least ``min_new_mentions`` since its last summary (progress key
``"<entity id>#<mention count>"`` under stage ``attributes``). Each due entity gets one
``entity_attributes`` request built from its previous summary, up to ``max_messages`` mentioning
messages (the new ones, evenly spread) and up to ``max_facts`` live facts touching it; all entities
of all groups go in one ``generate`` per chunk of ``llm.chunk_size`` entities, each chunk committed.
Summaries are re-embedded (``entity_summary`` = "name: summary").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mnemis.ingest.common import bump_stats, run_prompt
from mnemis.models.llm.chunks import chunk_size
from mnemis.models.protocols import Embedder
from mnemis.prompts.entity_attributes import (
    ENTITY_ATTRIBUTES,
    ENTITY_ATTRIBUTES_UPDATE,
    MAX_SUMMARY_CHARS,
    clean_tags,
)
from mnemis.prompts.limits import DEFAULT_LIMITS, PromptLimits
from mnemis.store.sqlite import GraphStore
from mnemis.texts import entity_texts
from mnemis.types import Entity, Episode

STAGE = "attributes"
EPISODE_STAGE = "attributes.episode"  # progress key: episode id
STALE_STAGE = "attributes.stale"  # progress key: entity id whose summary embedding is out of date
REFRESH_MODES = ("end", "episode")


@dataclass
class EpisodeEvidence:
    """One episode of a step: its group's entities, the episode, its earlier context, the entities it
    mentions (resolved ids) and, per entity, the episode's facts about it (rendered)."""

    group_id: str
    entities: dict[str, Entity]
    episode: Episode
    previous: Sequence[Episode]
    entity_ids: Sequence[str]
    facts: Mapping[str, Sequence[str]]


def _apply_reply(e: Entity, rep: Any, stats: Counter) -> Entity:
    """``e`` with the summary and tags of a parsed reply (cleaned; empty fields keep the old value)."""
    summary = " ".join(rep.summary.split())[:MAX_SUMMARY_CHARS]
    tags = clean_tags(rep.tags)
    if len(rep.tags) > len(tags):
        stats["skip.tags_dropped"] += len(rep.tags) - len(tags)
    return e.model_copy(update={"summary": summary or e.summary, "tags": tags or e.tags})


def update_step(
    store: GraphStore,
    items: Sequence[EpisodeEvidence],
    llm: Any,
    stats: Counter,
    *,
    max_tokens: int = 192,
    temperature: float = 0.0,
    limits: PromptLimits = DEFAULT_LIMITS,
) -> int:
    """Update the summary and tags of every entity mentioned by the step's episodes (one per group;
    one ``generate`` for all), write them, mark the episodes done and the entities stale, in one
    transaction. ``item.entities`` is updated in place (entity resolution reads it). Returns the
    number of entities rewritten; a failed reply keeps the entity as it was (counted)."""
    jobs: list[tuple[EpisodeEvidence, Entity]] = []
    renders = []
    for it in items:
        for eid in dict.fromkeys(it.entity_ids):
            e = it.entities.get(eid)
            if e is None:
                raise RuntimeError(
                    f"episode {it.episode.id} mentions entity {eid} unknown to group {it.group_id}")
            renders.append(ENTITY_ATTRIBUTES_UPDATE.render(e.name, e.summary, e.tags, it.episode, it.previous,
                                                           it.facts.get(eid, ()), limits))
            jobs.append((it, e))
    replies = run_prompt(llm, ENTITY_ATTRIBUTES_UPDATE, renders, stats, max_tokens=max_tokens,
                         temperature=temperature)
    updated: dict[str, list[Entity]] = defaultdict(list)
    for (it, e), rep in zip(jobs, replies):
        if rep is None:
            continue
        new = _apply_reply(e, rep, stats)
        it.entities[new.id] = new
        updated[it.group_id].append(new)
    n = sum(len(v) for v in updated.values())
    stats["attributes.refreshed"] += n
    with store.transaction():
        for g, ents in updated.items():
            store.upsert_entities(ents)
            store.mark_done(STALE_STAGE, g, [e.id for e in ents])
        for it in items:
            store.mark_done(EPISODE_STAGE, it.group_id, [it.episode.id])
        bump_stats(store, stats)
    return n


def embed_stale(store: GraphStore, group_ids: Sequence[str], embedder: Embedder) -> int:
    """Re-embed the summaries recorded as stale by ``update_step`` (one ``encode`` for all groups), then
    clear the records; returns how many were embedded."""
    rows: list[Entity] = []
    for g in group_ids:
        stale = store.done(STALE_STAGE, g)
        if stale:
            rows += store.entities(g, sorted(stale))
    if rows:
        vecs = embedder.encode(entity_texts(rows))
    with store.transaction():
        by_group: dict[str, list[int]] = defaultdict(list)
        for r, e in enumerate(rows):
            by_group[e.group_id].append(r)
        for g, idx in by_group.items():
            store.put_embeddings(g, "entity_summary", [rows[r].id for r in idx], vecs[idx])
        for g in group_ids:
            store.clear_progress(STALE_STAGE, g)
    return len(rows)


def _spread(items: Sequence[str], n: int) -> list[str]:
    """``n`` items evenly spread over ``items`` (first and last included), in order."""
    if len(items) <= n:
        return list(items)
    if n <= 1:
        return [items[-1]]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def refresh_attributes(
    store: GraphStore,
    group_ids: Sequence[str],
    llm: Any,
    embedder: Embedder,
    stats: Counter,
    *,
    min_new_mentions: int = 1,
    max_messages: int = 4,
    max_facts: int = 5,
    max_tokens: int = 192,
    temperature: float = 0.0,
) -> int:
    """Summarise every due entity of ``group_ids``; returns how many were refreshed."""
    jobs: list[tuple[Entity, str]] = []  # (entity, progress key)
    renders = []
    for g in group_ids:
        mentions: dict[str, list[str]] = defaultdict(list)
        for m in store.mentions(g):
            mentions[m.entity_id].append(m.episode_id)
        last: dict[str, int] = {}
        for key in store.done(STAGE, g):
            eid, _, n = key.rpartition("#")
            last[eid] = max(last.get(eid, 0), int(n))
        due = [e for e in store.entities(g)
               if len(mentions.get(e.id, [])) - last.get(e.id, 0) >= min_new_mentions
               and len(mentions.get(e.id, [])) > last.get(e.id, 0)]
        if not due:
            continue
        wanted = {ep for e in due for ep in _spread(mentions[e.id][last.get(e.id, 0):], max_messages)}
        episodes = {ep.id: ep for ep in store.episodes(g, wanted)}
        facts = store.facts_touching(g, [e.id for e in due])
        by_entity: dict[str, list[str]] = defaultdict(list)
        for f in reversed(facts):  # newest first
            if f.invalid_at is None:
                for end in {f.source_id, f.target_id}:
                    by_entity[end].append(f.fact)
        for e in due:
            shown = _spread(mentions[e.id][last.get(e.id, 0):], max_messages)
            eps = [episodes[i] for i in shown if i in episodes]
            msgs = [f"[{ep.valid_at:%Y-%m-%d}] {ep.content}" for ep in eps]
            renders.append(ENTITY_ATTRIBUTES.render(e.name, e.summary, msgs, by_entity[e.id][:max_facts]))
            jobs.append((e, f"{e.id}#{len(mentions[e.id])}"))
    size, refreshed = chunk_size(llm), 0
    for start in range(0, len(jobs), size):  # each chunk committed: a kill loses one at most
        refreshed += _refresh_chunk(store, llm, embedder, stats, jobs[start:start + size],
                                    renders[start:start + size], max_tokens=max_tokens, temperature=temperature)
    return refreshed


def _refresh_chunk(store: GraphStore, llm: Any, embedder: Embedder, stats: Counter, jobs: list[tuple[Entity, str]],
                   renders: list, *, max_tokens: int, temperature: float) -> int:
    """One chunk of due entities: one ``generate``, then entities, embeddings and progress in one commit."""
    delta: Counter = Counter()
    replies = run_prompt(llm, ENTITY_ATTRIBUTES, renders, delta, max_tokens=max_tokens,
                         temperature=temperature)
    updated: list[Entity] = []
    for (e, _), rep in zip(jobs, replies):
        if rep is not None:
            updated.append(_apply_reply(e, rep, delta))
    vecs = embedder.encode(entity_texts(updated)) if updated else None
    delta["attributes.refreshed"] += len(updated)
    with store.transaction():
        by_group: dict[str, list[int]] = defaultdict(list)
        for r, e in enumerate(updated):
            by_group[e.group_id].append(r)
        for g, rows in by_group.items():
            store.upsert_entities([updated[r] for r in rows])
            store.put_embeddings(g, "entity_summary", [updated[r].id for r in rows], vecs[rows])
        done: dict[str, list[str]] = defaultdict(list)
        for e, key in jobs:
            done[e.group_id].append(key)
        for g, keys in done.items():
            store.mark_done(STAGE, g, keys)
        bump_stats(store, delta)
    stats.update(delta)
    return len(updated)
