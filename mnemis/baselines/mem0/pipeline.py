"""The Mem0 / Mem0g baselines end to end: build the memory, search, render, answer, judge, metrics.

``run_mem0(dataset, llm, embedder, cfg, work_dir)`` builds (or resumes) the memory of every group of
``dataset`` and returns one rendered context per question (``dataset.questions`` order) plus the raw
retrieved contexts. A group's memory is one store (``per_speaker: false``) or one store per speaker
(``per_speaker: true``, as the Mem0 LoCoMo evaluation keeps them: each speaker's store mines only that
speaker's messages and is searched with its own top-``k``). Building is stepped like the Mnemis stages:
step *i* takes the *i*-th pending message pair of every group and makes one ``generate`` for due
summaries, one for the extraction of every store's facts and, per fact index, one for the update
decisions of every store (Mem0g adds its graph stages to the same step). The memory lives in
``<work_dir>/mem0.sqlite``; each step commits in one transaction, so a killed run resumes where it
stopped. ``evaluate_mem0`` adds the shared answerer, judges and metrics.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mnemis.baselines.mem0.extract import (
    ExtractJob,
    Pair,
    extract_facts,
    make_pairs,
    refresh_summaries,
    sorted_messages,
    speakers_of,
    summary_due,
)
from mnemis.baselines.mem0.search import StoreRef, render_memories, search_memories
from mnemis.baselines.mem0.store import Mem0Store
from mnemis.baselines.mem0.update import GroupMemories, PairFacts, commit_update, update_step
from mnemis.settings import Mem0Settings
from mnemis.types import Dataset, Episode, RetrievedContext

log = logging.getLogger(__name__)
STORE_FILE = "mem0.sqlite"
GRAPH_FILE = "mem0g.sqlite"
DEFAULT_MAX_TOKENS = {"mem0_extract": 384, "mem0_update": 192, "mem0_summary": 400, "query_entities": 128,
                      "mem0g_entities": 192, "mem0g_relations": 384, "mem0g_conflicts": 192}
GRAPH_KINDS = ("triples", "graphiti")


@dataclass
class Mem0Config:
    """Settings of the Mem0 / Mem0g baseline (the keys of ``conf/mem0/mem0*.yaml``).

    Attributes:
        m: earlier messages shown with each pair in the extraction prompt.
        s: similar memories shown with each candidate fact in the update prompt.
        summary_every: most messages between refreshes of the conversation summary (0 = no summary); it
            is also refreshed whenever the ``m``-message window would not reach back to it.
        k: memories retrieved per question from each store.
        per_speaker: one memory store per speaker (the Mem0 LoCoMo evaluation) instead of one per group.
        pair_size: messages per ingestion unit (2 = Mem0's message pair), cut inside sessions.
        max_facts: candidate facts kept per pair (also the reply schema's ``maxItems``).
        graph: Mem0g (relations from the graph are added to the context).
        graph_kind: "triples" (Mem0g as published: typed entity nodes, (source, relation, destination)
            triples, soft invalidation) or "graphiti" (our richer ablation: the Mnemis base-graph stages,
            relations with a fact sentence and validity dates).
        graph_k / graph_entity_k / graph_min_similarity / graph_include_invalid: relation retrieval.
        graph_node_threshold: cosine from which an extracted entity reuses a stored node ("triples").
        graph_context_window: earlier messages shown by the base-graph extraction prompts ("graphiti").
        max_tokens: reply budget per stage; temperature: sampling temperature of every call.
    """

    m: int = 10
    s: int = 10
    summary_every: int = 20
    k: int = 10
    per_speaker: bool = False
    pair_size: int = 2
    max_facts: int = 8
    graph: bool = False
    graph_kind: str = "triples"
    graph_k: int = 10
    graph_entity_k: int = 5
    graph_min_similarity: float = 0.5
    graph_include_invalid: bool = True
    graph_node_threshold: float = 0.9
    graph_context_window: int = 3
    max_tokens: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MAX_TOKENS))
    temperature: float = 0.0

    def __post_init__(self) -> None:
        bad = sorted(set(self.max_tokens) - set(DEFAULT_MAX_TOKENS))
        if bad:
            raise ValueError(f"unknown stages in max_tokens: {bad}")
        self.max_tokens = {**DEFAULT_MAX_TOKENS, **dict(self.max_tokens)}
        if min(self.m, self.s, self.summary_every, self.k, self.graph_k) < 0 or self.pair_size < 1 \
                or self.max_facts < 1:
            raise ValueError("mem0 settings must be non-negative (pair_size and max_facts >= 1)")
        if self.graph_kind not in GRAPH_KINDS:
            raise ValueError(f"mem0 graph_kind must be one of {GRAPH_KINDS}, got {self.graph_kind!r}")

    @classmethod
    def from_settings(cls, section: Mem0Settings) -> Mem0Config:
        """From a run's ``mem0`` / ``mem0g`` settings section (its ``name`` is the method's, not a setting)."""
        return cls(**{f.name: getattr(section, f.name) for f in fields(cls)})

    @property
    def method(self) -> str:
        return "mem0g" if self.graph else "mem0"


def group_messages(episodes: Sequence[Episode]) -> dict[str, list[Episode]]:
    msgs: dict[str, list[Episode]] = {}
    for e in episodes:
        msgs.setdefault(e.group_id, []).append(e)
    return {g: sorted_messages(v) for g, v in msgs.items()}


def store_layout(msgs: Mapping[str, Sequence[Episode]], per_speaker: bool) -> dict[str, list[StoreRef]]:
    """The memory stores of each group: the group itself, or ``<group>::<speaker>`` per speaker."""
    if not per_speaker:
        return {g: [StoreRef(g)] for g in msgs}
    return {g: [StoreRef(f"{g}::{sp}", sp) for sp in speakers_of(eps)] for g, eps in msgs.items()}


def mines(ref: StoreRef, pair: Pair) -> bool:
    """Whether store ``ref`` learns from ``pair`` (a speaker's store only from that speaker's messages)."""
    return ref.speaker is None or ref.speaker in pair.speakers()


def build_mem0(episodes: Sequence[Episode], llm: Any, embedder: Any, cfg: Mem0Config, store: Mem0Store,
               graph: Any = None) -> dict[str, Counter]:
    """Ingest ``episodes`` (any groups) pair by pair; resumes pairs already done. Returns counters per
    store key (and per group for the summary). ``graph``: Mem0g's triple-graph builder, fed the same
    extraction jobs at every step (:class:`mnemis.baselines.mem0.triples.TripleGraph`)."""
    msgs = group_messages(episodes)
    layout = store_layout(msgs, cfg.per_speaker)
    done = {ref.key: store.done("pair", ref.key) for refs in layout.values() for ref in refs}
    queues = {}
    for g, eps in msgs.items():
        todo = [p for p in make_pairs(eps, cfg.pair_size)
                if any(mines(ref, p) and p.id not in done[ref.key] for ref in layout[g])]
        if todo:
            queues[g] = todo
    states = {ref.key: GroupMemories(store, ref.key) for g in queues for ref in layout[g]}
    summaries = {g: store.summary(g) for g in queues}
    totals: dict[str, Counter] = {}
    n_steps = max((len(q) for q in queues.values()), default=0)
    log.info("mem0: %d message pairs in %d groups (%d stores), %d steps", sum(map(len, queues.values())),
             len(queues), len(states), n_steps)
    mt = cfg.max_tokens
    for i in range(n_steps):
        step = [(g, q[i]) for g, q in queues.items() if i < len(q)]
        counters: dict[str, Counter] = {}
        due = [(g, summaries[g][0], msgs[g][summaries[g][1]:p.start], p.start) for g, p in step
               if summary_due(summaries[g][1], p, cfg.summary_every, cfg.m)]
        refreshed = refresh_summaries(due, llm, counters, max_tokens=mt["mem0_summary"], temperature=cfg.temperature)
        summaries.update(refreshed)
        jobs = [ExtractJob(ref.key, p, summaries[g][0], msgs[g][max(0, p.start - cfg.m):p.start], ref.speaker)
                for g, p in step for ref in layout[g] if mines(ref, p) and p.id not in done[ref.key]]
        facts = extract_facts(jobs, llm, counters, max_facts=cfg.max_facts, max_tokens=mt["mem0_extract"],
                              temperature=cfg.temperature)
        items = [PairFacts(states[j.store], j.pair.id, [e.id for e in j.pair.messages], j.pair.time, f)
                 for j, f in zip(jobs, facts)]
        outcomes = update_step(items, llm, embedder, s=cfg.s, max_tokens=mt["mem0_update"],
                               temperature=cfg.temperature)
        graph_change = graph.step(jobs, counters) if graph is not None else None
        with store.transaction():
            for g, (text, covered) in refreshed.items():
                store.set_summary(g, text, covered)
            if graph_change is not None:
                graph.commit(graph_change)
            commit_update(store, outcomes)
            for key, c in counters.items():
                store.bump(key, c)
        for out in outcomes:
            totals.setdefault(out.group_id, Counter()).update(out.counters)
        for key, c in counters.items():
            totals.setdefault(key, Counter()).update(c)
    return totals


@dataclass
class Mem0Run:
    """Output of :func:`run_mem0`: per question (dataset order) its rendered context and hits."""

    method: str
    contexts: list[str]
    retrieved: list[RetrievedContext]
    stats: dict[str, Any] = field(default_factory=dict)


FINISHED_FILE = "finished.json"


def _questions_key(questions: Sequence[Any], conf: Mem0Config) -> str:
    """What the finished record answers: these questions (ids and texts), searched with these settings."""
    blob = json.dumps([[q.id, q.group_id, q.question] for q in questions] + [repr(conf)], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _load_finished(work: Path, key: str, conf: Mem0Config) -> Mem0Run | None:
    """The recorded end of an earlier run with the same questions and settings (None if absent or stale)."""
    path = work / FINISHED_FILE
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        if rec.get("key") != key:
            return None
        return Mem0Run(conf.method, list(rec["contexts"]),
                       [RetrievedContext.model_validate(r) for r in rec["retrieved"]], dict(rec["stats"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:  # a torn or foreign file: redo the (cheap) end step
        log.warning("%s: unreadable (%s); searching again", path, exc)
        return None


def _save_finished(work: Path, key: str, run: Mem0Run) -> None:
    tmp = work / (FINISHED_FILE + ".tmp")
    tmp.write_text(json.dumps({"key": key, "contexts": run.contexts,
                               "retrieved": [r.model_dump(mode="json") for r in run.retrieved],
                               "stats": run.stats}, default=str), encoding="utf-8")
    tmp.replace(work / FINISHED_FILE)


def run_mem0(dataset: Dataset, llm: Any, embedder: Any, cfg: Mem0Settings | Mem0Config,
             work_dir: str | Path) -> Mem0Run:
    """Build (or resume) the Mem0 (``graph: false``) or Mem0g (``graph: true``) memory of ``dataset``
    under ``work_dir`` and retrieve and render the context of every question of ``dataset``.

    The end of a run (contexts, hits, counters) is recorded in ``finished.json``: a rerun on the same
    questions and settings returns it and sends no LLM request, even without the response cache."""
    conf = cfg if isinstance(cfg, Mem0Config) else Mem0Config.from_settings(cfg)
    work = Path(work_dir)
    key = _questions_key(dataset.questions, conf)
    finished = _load_finished(work, key, conf)
    if finished is not None:
        return finished
    run = _run_mem0(dataset, llm, embedder, conf, work)
    _save_finished(work, key, run)
    return run


def _run_mem0(dataset: Dataset, llm: Any, embedder: Any, conf: Mem0Config, work: Path) -> Mem0Run:
    store = Mem0Store(work / STORE_FILE)
    questions = list(dataset.questions)
    layout = store_layout(group_messages(dataset.episodes), conf.per_speaker)
    triples = conf.graph and conf.graph_kind == "triples"
    try:
        graph = None
        if triples:
            from mnemis.baselines.mem0.triples import TripleGraph

            graph = TripleGraph(store, llm, embedder, conf)
        build_mem0(dataset.episodes, llm, embedder, conf, store, graph=graph)
        retrieved = search_memories(store, embedder, questions, layout, k=conf.k)
        extra = None
        if graph is not None:
            hits, extra = graph.search(questions, layout)
            for ctx, h in zip(retrieved, hits):
                ctx.facts += h
                have = {e.id for e in ctx.episodes}
                ctx.episodes += [e for e in graph.episode_hits(h) if e.id not in have]  # evidence recall
        contexts = render_memories(store, retrieved, layout, extra=extra)
        keys = {g: [g] + [r.key for r in layout.get(g, ()) if r.key != g] for g in dataset.groups}
        stats: dict[str, Any] = {
            "stores": {g: [r.key for r in layout.get(g, ())] for g in dataset.groups},
            "memories": {g: sum(store.count(r.key) for r in layout.get(g, ())) for g in dataset.groups},
            "deleted": {g: sum(store.count(r.key, include_deleted=True) - store.count(r.key)
                               for r in layout.get(g, ())) for g in dataset.groups},
            "counters": {g: dict(sum((Counter(store.totals(k)) for k in keys[g]), Counter())) for g in dataset.groups},
        }
        if graph is not None:
            stats["graph"] = {"kind": "triples", "counts": {g: graph.counts([r.key for r in layout.get(g, ())])
                                                            for g in dataset.groups}}
    finally:
        store.close()
    if conf.graph and not triples:
        contexts = _graphiti_relations(dataset, llm, embedder, conf, work, questions, retrieved, layout, stats)
    return Mem0Run(conf.method, contexts, retrieved, stats)


def _graphiti_relations(dataset: Dataset, llm: Any, embedder: Any, conf: Mem0Config, work: Path,
                        questions: list[Any], retrieved: list[RetrievedContext],
                        layout: Mapping[str, Sequence[StoreRef]], stats: dict[str, Any]) -> list[str]:
    """The "graphiti" Mem0g ablation: the Mnemis base-graph stages build one graph per group; its
    relations (fact sentence and validity dates) are appended to the memories of each question."""
    from mnemis.baselines.mem0.graph import build_graph, render_relations, search_graph

    graph, build_stats = build_graph(dataset.episodes, llm, embedder, work / GRAPH_FILE,
                                     context_window=conf.graph_context_window, max_candidates=conf.s,
                                     temperature=conf.temperature)
    try:
        hits = search_graph(graph, llm, embedder, questions, k=conf.graph_k, entity_k=conf.graph_entity_k,
                            min_similarity=conf.graph_min_similarity, include_invalid=conf.graph_include_invalid,
                            max_tokens=conf.max_tokens["query_entities"], temperature=conf.temperature)
        extra = []
        for q, ctx, h in zip(questions, retrieved, hits):
            ctx.facts += h
            extra.append({"": render_relations(graph, q.group_id, h)})
        stats["graph"] = {"kind": "graphiti", "build": build_stats,
                          "facts": {g: graph.counts(g) for g in dataset.groups}}
    finally:
        graph.close()
    store = Mem0Store(work / STORE_FILE)
    try:
        return render_memories(store, retrieved, layout, extra=extra)
    finally:
        store.close()


def evaluate_mem0(dataset: Dataset, llm: Any, embedder: Any, cfg: Mapping[str, Any] | Mem0Config | None,
                  work_dir: str | Path, *, judges: Mapping[str, Any], answer_llm: Any = None,
                  answer_max_tokens: int = 256, seed: int = 0) -> tuple[Mem0Run, list[Any], dict[str, Any]]:
    """``run_mem0`` then the shared answerer and judges: returns the run, the question records and the
    metrics of this method (``compute_metrics``; the value to put under ``metrics.json[method]``)."""
    from mnemis.eval.answer import answer_questions
    from mnemis.eval.judge import judge_answers
    from mnemis.eval.metrics import compute_metrics
    from mnemis.eval.records import build_records

    run = run_mem0(dataset, llm, embedder, cfg, work_dir)
    questions = list(dataset.questions)
    answers = answer_questions(answer_llm or llm, questions, run.contexts, max_tokens=answer_max_tokens, seed=seed)
    labels = judge_answers(judges, questions, answers)
    records = build_records(questions, answers, labels, method=run.method, seed=seed, contexts=run.retrieved)
    return run, records, compute_metrics(records)
