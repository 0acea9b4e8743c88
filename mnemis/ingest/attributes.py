"""Entity summaries and tags (REFERENCE §2.2 step 7), refreshed when an entity gained mentions.

An entity is due when its mention count grew by at least ``min_new_mentions`` since its last summary
(progress key ``"<entity id>#<mention count>"`` under stage ``attributes``). Each due entity gets one
``entity_attributes`` request built from its previous summary, up to ``max_messages`` mentioning
messages (the new ones, evenly spread) and up to ``max_facts`` live facts touching it; all entities of
all groups go in one ``generate`` per chunk of ``llm.chunk_size`` entities, each chunk committed. Summaries are re-embedded (``entity_summary`` = "name: summary").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from mnemis.ingest.common import bump_stats, run_prompt
from mnemis.ingest.embed_items import entity_texts
from mnemis.models.llm.chunks import chunk_size
from mnemis.models.protocols import Embedder
from mnemis.prompts.entity_attributes import ENTITY_ATTRIBUTES, MAX_SUMMARY_CHARS, clean_tags
from mnemis.store.sqlite import GraphStore
from mnemis.types import Entity

STAGE = "attributes"


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
        if rep is None:
            continue
        summary = " ".join(rep.summary.split())[:MAX_SUMMARY_CHARS]  # type: ignore[attr-defined]
        tags = clean_tags(rep.tags)  # type: ignore[attr-defined]
        if len(rep.tags) > len(tags):  # type: ignore[attr-defined]
            delta["skip.tags_dropped"] += len(rep.tags) - len(tags)  # type: ignore[attr-defined]
        updated.append(e.model_copy(update={"summary": summary or e.summary, "tags": tags or e.tags}))
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
