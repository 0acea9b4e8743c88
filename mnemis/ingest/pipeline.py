"""Base-graph construction (DESIGN §2): bulk and incremental ingestion share one code path.

``BaseGraphBuilder.ingest(episodes)`` (alias ``add``) runs, over every pending episode of every group:

1. store the episodes;
2. extraction: entity names, reflection, the speaker rule, facts, fact reflection - each step one
   batched ``generate`` over a chunk of pending episodes (``llm.chunk_size``, all groups); results
   committed per chunk;
3. then, per group in episode order, step *i* = the *i*-th pending episode of every group:
   entity resolution (one ``generate`` per step; entities, name embeddings, mentions and aliases
   committed), fact dedup and contradiction (one ``generate``, committed) and, with
   ``attribute_refresh="episode"`` (the paper), the summaries and tags of the episode's entities
   (one ``generate``, committed), so the next step's resolution sees them;
4. with ``attribute_refresh="end"`` (default): summaries and tags of entities that gained mentions, once
   (one ``generate``); with ``"episode"``: the summaries rewritten in step 3 are embedded;
5. embeddings of everything still missing one (episodes, entity names/summaries, facts).

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

from mnemis.ingest.attributes import (
    EPISODE_STAGE,
    REFRESH_MODES,
    EpisodeEvidence,
    embed_stale,
    refresh_attributes,
    update_step,
)
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
from mnemis.ingest.facts import GroupFacts, commit_facts, dedup_step, render_fact
from mnemis.ingest.resolve import GroupEntities, commit_resolution, resolve_step
from mnemis.models.llm.chunks import chunk_size, chunked
from mnemis.models.protocols import Embedder
from mnemis.prompts.limits import PromptLimits
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
        max_candidates: candidates per extracted name (new fact) with ``per_item_candidates``, else
            per resolution (dedup) request.
        per_item_candidates: each name / fact keeps its own top ``max_candidates`` and a request shows
            their union (Graphiti); False: an episode's items share ``max_candidates`` slots.
        min_name_similarity / min_fact_similarity: cosine floor for embedding candidates.
        attribute_refresh: ``"end"`` (summaries rewritten once per ingest call from sampled evidence) or
            ``"episode"`` (after every episode, in order, cumulative: the paper).
        attribute_min_new_mentions: (``"end"``) new mentions before an entity's summary is rewritten.
        attribute_messages / attribute_facts: (``"end"``) evidence shown per summary request.
        max_tokens: reply budget per stage (defaults in ``DEFAULT_MAX_TOKENS``).
        temperature: sampling temperature of every call (0 = reproducible with the cache).
        embed_kinds: embedding kinds written at the end (() to skip).
        show_progress: tqdm bars (None = only on a TTY).
        prompt_limits: what the base-graph prompts show and how many names / facts a reply may hold
            (:class:`mnemis.prompts.limits.PromptLimits`; ``mode=paper`` lifts every limit).
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
        per_item_candidates: bool = True,
        min_name_similarity: float = 0.5,
        min_fact_similarity: float = 0.5,
        attribute_refresh: str = "end",
        attribute_min_new_mentions: int = 1,
        attribute_messages: int = 4,
        attribute_facts: int = 5,
        max_tokens: Mapping[str, int] | None = None,
        temperature: float = 0.0,
        embed_kinds: Sequence[str] = EMBED_KINDS,
        show_progress: bool | None = None,
        prompt_limits: PromptLimits | Mapping[str, Any] | None = None,
    ) -> None:
        if context_window < 0 or entity_reflection_rounds < 0 or fact_reflection_rounds < 0:
            raise ValueError("context_window and reflection rounds must be >= 0")
        if max_candidates < 1:
            raise ValueError("max_candidates must be >= 1")
        if context_scope not in ("group", "session"):
            raise ValueError(f"context_scope must be 'group' or 'session', got {context_scope!r}")
        if attribute_refresh not in REFRESH_MODES:
            raise ValueError(f"attribute_refresh must be one of {REFRESH_MODES}, got {attribute_refresh!r}")
        self.store, self.llm, self.embedder = store, llm, embedder
        self.context_window = context_window
        self.context_scope = context_scope
        self.entity_reflection_rounds = entity_reflection_rounds
        self.fact_reflection_rounds = fact_reflection_rounds
        self.max_candidates = max_candidates
        self.per_item_candidates = per_item_candidates
        self.attribute_refresh = attribute_refresh
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
        self.limits = prompt_limits if isinstance(prompt_limits, PromptLimits) else \
            PromptLimits.model_validate(dict(prompt_limits or {}))

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
        delta: Counter = Counter()
        if self.attribute_refresh == "episode":
            embedded = embed_stale(self.store, groups, self.embedder)
            if embedded:
                delta["attributes.embedded"] = embedded
        else:
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
                max_tokens=self.max_tokens, temperature=self.temperature, limits=self.limits,
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

    def _resolve(self, by_group: dict[str, list[Episode]], counters: Counter) -> None:
        """Step *i* = the *i*-th unfinished episode of every group: resolve its entities, then its facts,
        then (``attribute_refresh="episode"``) its entities' summaries; each a batched call + a commit."""
        stages = ["resolve", "facts"] + ([EPISODE_STAGE] if self.attribute_refresh == "episode" else [])
        done = {g: {s: self.store.done(s, g) for s in stages} for g in by_group}
        queues = {}
        for g, eps in by_group.items():
            todo = [e for e in eps if any(e.id not in done[g][s] for s in stages)]
            if todo:
                queues[g] = todo
        if not queues:
            return
        n_steps = max(len(q) for q in queues.values())
        entities = {g: GroupEntities(self.store, g, self.embedder) for g in queues}
        facts = {g: GroupFacts(self.store, g, self.embedder) for g in queues}
        context = {g: self._context(g) for g in queues} if EPISODE_STAGE in stages else {}
        for i in progress(range(n_steps), total=n_steps, desc="resolve", enabled=self.show_progress):
            step = [(g, q[i]) for g, q in queues.items() if i < len(q)]
            todo = [(entities[g], e, self._load_extraction(e)) for g, e in step
                    if e.id not in done[g]["resolve"]]
            if todo:
                delta: Counter = Counter()
                outcomes = resolve_step(
                    todo, self.llm, self.embedder, delta, max_candidates=self.max_candidates,
                    min_similarity=self.min_name_similarity, max_tokens=self.max_tokens["resolve_entities"],
                    temperature=self.temperature, per_item=self.per_item_candidates, limits=self.limits,
                )
                commit_resolution(self.store, entities, outcomes, delta)
                counters.update(delta)
            todo = [(facts[g], e, self._load_extraction(e), self._resolved(e)) for g, e in step
                    if e.id not in done[g]["facts"]]
            if todo:
                delta = Counter()
                outcomes = dedup_step(
                    todo, self.llm, self.embedder, delta, max_candidates=self.max_candidates,
                    min_similarity=self.min_fact_similarity, max_tokens=self.max_tokens["dedup_facts"],
                    temperature=self.temperature, per_item=self.per_item_candidates, limits=self.limits,
                )
                commit_facts(self.store, outcomes, delta)
                counters.update(delta)
            if EPISODE_STAGE in stages:
                evidence = [self._evidence(entities[g], facts[g], e, context[g][e.id]) for g, e in step
                            if e.id not in done[g][EPISODE_STAGE]]
                if evidence:
                    delta = Counter()
                    update_step(self.store, evidence, self.llm, delta,
                                max_tokens=self.max_tokens["entity_attributes"], temperature=self.temperature,
                                limits=self.limits)
                    counters.update(delta)

    def _resolved(self, e: Episode) -> list[str | None]:
        resolved = self.store.get_meta(RESOLVED_KEY.format(e.id))
        if resolved is None:
            raise RuntimeError(f"episode {e.id} has no stored entity resolution")
        return list(resolved)  # type: ignore[call-overload]

    def _evidence(self, ents: GroupEntities, facts: GroupFacts, e: Episode,
                  previous: Sequence[Episode]) -> EpisodeEvidence:
        """What the summary update of episode ``e`` shows: its mentioned entities and, per entity, the
        facts this episode stated or repeated about it (with their validity period)."""
        ids = [i for i in dict.fromkeys(self._resolved(e)) if i is not None]
        about: dict[str, list[str]] = {}
        for eid in ids:
            rows = [facts.facts[f] for f in facts.by_entity.get(eid, [])]
            about[eid] = [render_fact(f, self.limits.fact_dates) for f in rows if e.id in f.episode_ids]
        return EpisodeEvidence(ents.group_id, ents.entities, e, previous, ids, about)
