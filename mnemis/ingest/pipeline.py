"""Base-graph construction (DESIGN §2): bulk and incremental ingestion share one code path.

``BaseGraphBuilder.ingest(episodes)`` (alias ``add``) runs, over every pending episode of every group:

1. store the episodes;
2. extraction: entity names, reflection, the speaker rule, facts, fact reflection - each step one
   batched ``generate`` over a chunk of pending episodes (``llm.chunk_size``, all groups); results
   committed per chunk;
3. entity resolution per group in episode order, step *i* = the *i*-th pending episode of every group,
   one ``generate`` per step; entities, name embeddings, mentions and aliases committed per step;
4. fact dedup and contradiction, stepped the same way;
5. summaries and tags of entities that gained mentions (one ``generate``);
6. embeddings of everything still missing one (episodes, entity names/summaries, facts).

Every commit is one transaction that also records progress (``store.mark_done``) and adds its
counters to the stored totals, so a killed run resumes where it stopped and, with the response cache,
reproduces the same graph: ids are deterministic (``entity_id(group, name)``,
``fact_id(group, episode, index)``) and "now" for ``created_at``/``expired_at`` is the episode's time.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from mnemis.ingest.attributes import refresh_attributes
from mnemis.ingest.common import (
    DEFAULT_MAX_TOKENS,
    EXTRACT_KEY,
    RESOLVED_KEY,
    STATS_KEY,
    BuildStats,
    bump_stats,
    progress,
)
from mnemis.ingest.embed_items import embed_missing
from mnemis.ingest.extract import EpisodeExtraction, extract_episodes
from mnemis.ingest.facts import GroupFacts, commit_facts, dedup_step
from mnemis.ingest.resolve import GroupEntities, commit_resolution, resolve_step
from mnemis.models.llm.chunks import chunk_size, chunked
from mnemis.models.protocols import Embedder
from mnemis.store.sqlite import GraphStore
from mnemis.types import Episode

log = logging.getLogger(__name__)

EMBED_KINDS = ("episode", "entity_name", "entity_summary", "fact")


class BaseGraphBuilder:
    """Builds and updates the base graph of a memory.

    Args:
        store: the memory's graph store.
        llm: ``mnemis.models.llm.client.LLM`` (or anything with ``generate(requests)``).
        embedder: document embedder for names, summaries, facts and episodes.
        context_window: preceding messages of the same group shown with each episode.
        context_scope: ``"group"`` (the default: the window may reach into the previous session) or
            ``"session"`` (only earlier messages of the same session). With ``"session"`` an extraction prompt
            depends on the session alone, so a session shared by many LongMemEval haystacks is extracted
            once and replayed from the response cache (``experiments/scale/README.md``).
        entity_reflection_rounds / fact_reflection_rounds: "what did you miss?" rounds (0 = off).
        max_candidates: existing entities (facts) shown per resolution (dedup) request.
        min_name_similarity / min_fact_similarity: cosine floor for embedding candidates.
        attribute_min_new_mentions: new mentions before an entity's summary is rewritten.
        attribute_messages / attribute_facts: evidence shown per summary request.
        max_tokens: reply budget per stage (defaults in ``DEFAULT_MAX_TOKENS``).
        temperature: sampling temperature of every call (0 = reproducible with the cache).
        embed_kinds: embedding kinds written at the end (() to skip).
        show_progress: tqdm bars (None = only on a TTY).
    """

    def __init__(
        self,
        store: GraphStore,
        llm: Any,
        embedder: Embedder,
        *,
        context_window: int = 3,
        context_scope: str = "group",
        entity_reflection_rounds: int = 1,
        fact_reflection_rounds: int = 1,
        max_candidates: int = 10,
        min_name_similarity: float = 0.5,
        min_fact_similarity: float = 0.5,
        attribute_min_new_mentions: int = 1,
        attribute_messages: int = 4,
        attribute_facts: int = 5,
        max_tokens: Mapping[str, int] | None = None,
        temperature: float = 0.0,
        embed_kinds: Sequence[str] = EMBED_KINDS,
        show_progress: bool | None = None,
    ) -> None:
        if context_window < 0 or entity_reflection_rounds < 0 or fact_reflection_rounds < 0:
            raise ValueError("context_window and reflection rounds must be >= 0")
        if max_candidates < 1:
            raise ValueError("max_candidates must be >= 1")
        if context_scope not in ("group", "session"):
            raise ValueError(f"context_scope must be 'group' or 'session', got {context_scope!r}")
        self.store, self.llm, self.embedder = store, llm, embedder
        self.context_window = context_window
        self.context_scope = context_scope
        self.entity_reflection_rounds = entity_reflection_rounds
        self.fact_reflection_rounds = fact_reflection_rounds
        self.max_candidates = max_candidates
        self.min_name_similarity = min_name_similarity
        self.min_fact_similarity = min_fact_similarity
        self.attribute_min_new_mentions = attribute_min_new_mentions
        self.attribute_messages = attribute_messages
        self.attribute_facts = attribute_facts
        unknown = set(max_tokens or {}) - set(DEFAULT_MAX_TOKENS)
        if unknown:
            raise ValueError(f"unknown stages in max_tokens: {sorted(unknown)}")
        self.max_tokens = {**DEFAULT_MAX_TOKENS, **(max_tokens or {})}
        self.temperature = temperature
        self.embed_kinds = tuple(embed_kinds)
        self.show_progress = show_progress

    # ------------------------------------------------------------------ public
    def ingest(self, episodes: Sequence[Episode]) -> BuildStats:
        """Add ``episodes`` (any groups, any order) to the graph; resumes any unfinished work on them."""
        episodes = list({(e.group_id, e.id): e for e in episodes}.values())  # a repeated episode counts once
        run = BuildStats(episodes=len(episodes))
        if not episodes:
            return run
        by_group: dict[str, list[Episode]] = defaultdict(list)
        for e in episodes:
            by_group[e.group_id].append(e)
        with self.store.transaction():
            for eps in by_group.values():
                self.store.upsert_episodes(eps)
        for g in by_group:
            by_group[g].sort(key=lambda e: (e.position, e.id))
        groups = list(by_group)
        self._extract(by_group, run.counters)
        self._resolve(by_group, run.counters)
        self._facts(by_group, run.counters)
        delta: Counter = Counter()
        refresh_attributes(
            self.store, groups, self.llm, self.embedder, delta,
            min_new_mentions=self.attribute_min_new_mentions, max_messages=self.attribute_messages,
            max_facts=self.attribute_facts, max_tokens=self.max_tokens["entity_attributes"],
            temperature=self.temperature,
        )
        run.counters.update(delta)
        if self.embed_kinds:
            written = embed_missing(self.store, self.embedder, groups, kinds=self.embed_kinds)
            run.counters.update({f"embedded.{k}": v for k, v in written.items()})
        run.totals = dict(self.store.get_meta(STATS_KEY, {}) or {})
        return run

    add = ingest

    # ------------------------------------------------------------------ stages
    def _context(self, g: str) -> dict[str, list[Episode]]:
        """Preceding ``context_window`` episodes (same group, by position; same session when
        ``context_scope="session"``) of every stored episode."""
        stored = sorted(self.store.episodes(g), key=lambda e: (e.position, e.id))
        k = self.context_window
        out = {}
        for i, e in enumerate(stored):
            window = stored[max(0, i - k):i] if k else []
            if self.context_scope == "session":
                window = [p for p in window if p.session == e.session]
            out[e.id] = window
        return out

    def _extract(self, by_group: dict[str, list[Episode]], counters: Counter) -> None:
        pending, previous = [], {}
        for g, eps in by_group.items():
            done = self.store.done("extract", g)
            todo = [e for e in eps if e.id not in done]
            if todo:
                ctx = self._context(g)
                previous.update({e.id: ctx[e.id] for e in todo})
                pending += todo
        if not pending:
            return
        log.info("extraction: %d episodes in %d groups", len(pending), len(by_group))
        for chunk in chunked(pending, chunk_size(self.llm)):  # each chunk committed: a kill loses one at most
            delta: Counter = Counter()
            out = extract_episodes(
                chunk, previous, self.llm, delta,
                entity_reflection_rounds=self.entity_reflection_rounds,
                fact_reflection_rounds=self.fact_reflection_rounds,
                max_tokens=self.max_tokens, temperature=self.temperature,
            )
            with self.store.transaction():
                for e in chunk:
                    self.store.set_meta(EXTRACT_KEY.format(e.id), out[e.id].to_json())
                for g, eps in by_group.items():
                    self.store.mark_done("extract", g, [e.id for e in eps if e.id in out])
                bump_stats(self.store, delta)
            counters.update(delta)

    def _load_extraction(self, e: Episode) -> EpisodeExtraction:
        data = self.store.get_meta(EXTRACT_KEY.format(e.id))
        if data is None:
            raise RuntimeError(f"episode {e.id} is marked extracted but has no stored extraction")
        return EpisodeExtraction.from_json(data)

    def _steps(self, stage: str, by_group: dict[str, list[Episode]]) -> tuple[dict[str, list[Episode]], int]:
        queues = {}
        for g, eps in by_group.items():
            done = self.store.done(stage, g)
            todo = [e for e in eps if e.id not in done]
            if todo:
                queues[g] = todo
        return queues, max((len(q) for q in queues.values()), default=0)

    def _resolve(self, by_group: dict[str, list[Episode]], counters: Counter) -> None:
        queues, n_steps = self._steps("resolve", by_group)
        states = {g: GroupEntities(self.store, g, self.embedder) for g in queues}
        for i in progress(range(n_steps), total=n_steps, desc="resolve entities", enabled=self.show_progress):
            items = [(states[g], q[i], self._load_extraction(q[i])) for g, q in queues.items() if i < len(q)]
            delta: Counter = Counter()
            outcomes = resolve_step(
                items, self.llm, self.embedder, delta, max_candidates=self.max_candidates,
                min_similarity=self.min_name_similarity, max_tokens=self.max_tokens["resolve_entities"],
                temperature=self.temperature,
            )
            commit_resolution(self.store, states, outcomes, delta)
            counters.update(delta)

    def _facts(self, by_group: dict[str, list[Episode]], counters: Counter) -> None:
        queues, n_steps = self._steps("facts", by_group)
        states = {g: GroupFacts(self.store, g, self.embedder) for g in queues}
        for i in progress(range(n_steps), total=n_steps, desc="resolve facts", enabled=self.show_progress):
            items = []
            for g, q in queues.items():
                if i < len(q):
                    resolved = self.store.get_meta(RESOLVED_KEY.format(q[i].id))
                    if resolved is None:
                        raise RuntimeError(f"episode {q[i].id} has no stored entity resolution")
                    items.append((states[g], q[i], self._load_extraction(q[i]), resolved))
            delta: Counter = Counter()
            outcomes = dedup_step(
                items, self.llm, self.embedder, delta, max_candidates=self.max_candidates,
                min_similarity=self.min_fact_similarity, max_tokens=self.max_tokens["dedup_facts"],
                temperature=self.temperature,
            )
            commit_facts(self.store, outcomes, delta)
            counters.update(delta)
