"""The Mem0 / Mem0g baselines end to end: build the memory, search, render, answer, judge, metrics.

``run_mem0(dataset, llm, embedder, cfg, work_dir)`` builds (or resumes) the memory of every group of
``dataset`` and returns one rendered context per question (``dataset.questions`` order) plus the raw
retrieved contexts. Building is stepped like the Mnemis stages: step *i* takes the *i*-th pending
message pair of every group and makes one ``generate`` for due summaries, one for extraction and one
for all update decisions. The memory lives in ``<work_dir>/mem0.sqlite`` (``mem0g.sqlite`` holds the
Mem0g graph); each step commits in one transaction, so a killed run resumes where it stopped.
``evaluate_mem0`` adds the shared answerer, judges and metrics.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mnemis.baselines.mem0.extract import extract_facts, make_pairs, refresh_summaries, sorted_messages, summary_due
from mnemis.baselines.mem0.search import render_memories, search_memories
from mnemis.baselines.mem0.store import Mem0Store
from mnemis.baselines.mem0.update import GroupMemories, PairFacts, commit_update, update_step
from mnemis.types import Dataset, Episode, RetrievedContext

log = logging.getLogger(__name__)
STORE_FILE = "mem0.sqlite"
GRAPH_FILE = "mem0g.sqlite"
DEFAULT_MAX_TOKENS = {"mem0_extract": 384, "mem0_update": 192, "mem0_summary": 400, "query_entities": 128}


@dataclass
class Mem0Config:
    """Settings of the Mem0 / Mem0g baseline (the keys of ``conf/method/mem0*.yaml``).

    Attributes:
        m: earlier messages shown with each pair in the extraction prompt.
        s: similar memories shown with each candidate fact in the update prompt.
        summary_every: messages between refreshes of the conversation summary (0 = no summary).
        k: memories retrieved per question.
        pair_size: messages per ingestion unit (2 = Mem0's message pair).
        max_facts: candidate facts kept per pair.
        graph: Mem0g (relations from the graph are added to the context).
        graph_k / graph_entity_k / graph_min_similarity / graph_include_invalid: relation retrieval.
        graph_context_window: earlier messages shown by the base-graph extraction prompts.
        max_tokens: reply budget per stage; temperature: sampling temperature of every call.
    """

    m: int = 10
    s: int = 10
    summary_every: int = 20
    k: int = 10
    pair_size: int = 2
    max_facts: int = 8
    graph: bool = False
    graph_k: int = 10
    graph_entity_k: int = 5
    graph_min_similarity: float = 0.5
    graph_include_invalid: bool = True
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

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any] | Mem0Config | None) -> Mem0Config:
        """From plain config keys (``name``/``method`` are ignored); unknown keys raise ValueError."""
        if isinstance(cfg, Mem0Config):
            return cfg
        data = {k: v for k, v in dict(cfg or {}).items() if k not in ("name", "method")}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown mem0 settings {unknown}; known: {sorted(known)}")
        if "max_tokens" in data:
            data["max_tokens"] = dict(data["max_tokens"])
        return cls(**data)

    @property
    def method(self) -> str:
        return "mem0g" if self.graph else "mem0"


def build_mem0(episodes: Sequence[Episode], llm: Any, embedder: Any, cfg: Mem0Config, store: Mem0Store
               ) -> dict[str, Counter]:
    """Ingest ``episodes`` (any groups) pair by pair; resumes pairs already done. Returns counters per group."""
    msgs: dict[str, list[Episode]] = {}
    for e in episodes:
        msgs.setdefault(e.group_id, []).append(e)
    msgs = {g: sorted_messages(v) for g, v in msgs.items()}
    queues = {}
    for g, eps in msgs.items():
        done = store.done("pair", g)
        todo = [p for p in make_pairs(eps, cfg.pair_size) if p.id not in done]
        if todo:
            queues[g] = todo
    states = {g: GroupMemories(store, g) for g in queues}
    summaries = {g: store.summary(g) for g in queues}
    totals: dict[str, Counter] = {g: Counter() for g in msgs}
    n_steps = max((len(q) for q in queues.values()), default=0)
    log.info("mem0: %d message pairs in %d groups, %d steps", sum(map(len, queues.values())), len(queues), n_steps)
    mt = cfg.max_tokens
    for i in range(n_steps):
        step = [(g, q[i]) for g, q in queues.items() if i < len(q)]
        counters: dict[str, Counter] = {g: Counter() for g, _ in step}
        due = [(g, summaries[g][0], msgs[g][summaries[g][1]:p.start], p.start) for g, p in step
               if summary_due(summaries[g][1], p, cfg.summary_every)]
        refreshed = refresh_summaries(due, llm, counters, max_tokens=mt["mem0_summary"], temperature=cfg.temperature)
        summaries.update(refreshed)
        jobs = [(p, summaries[g][0], msgs[g][max(0, p.start - cfg.m):p.start]) for g, p in step]
        facts = extract_facts(jobs, llm, counters, max_facts=cfg.max_facts, max_tokens=mt["mem0_extract"],
                              temperature=cfg.temperature)
        items = [PairFacts(states[g], p.id, [e.id for e in p.messages], p.time, f) for (g, p), f in zip(step, facts)]
        outcomes = update_step(items, llm, embedder, s=cfg.s, max_tokens=mt["mem0_update"],
                               temperature=cfg.temperature)
        with store.transaction():
            for g, (text, covered) in refreshed.items():
                store.set_summary(g, text, covered)
            commit_update(store, outcomes, counters)
        for out in outcomes:
            totals[out.group_id].update(out.counters)
            totals[out.group_id].update(counters[out.group_id])
    return totals


@dataclass
class Mem0Run:
    """Output of :func:`run_mem0`: per question (dataset order) its rendered context and hits."""

    method: str
    contexts: list[str]
    retrieved: list[RetrievedContext]
    stats: dict[str, Any] = field(default_factory=dict)


def run_mem0(dataset: Dataset, llm: Any, embedder: Any, cfg: Mapping[str, Any] | Mem0Config | None,
             work_dir: str | Path) -> Mem0Run:
    """Build (or resume) the Mem0 (``graph: false``) or Mem0g (``graph: true``) memory of ``dataset``
    under ``work_dir`` and retrieve and render the context of every question of ``dataset``."""
    conf = Mem0Config.from_mapping(cfg)
    work = Path(work_dir)
    store = Mem0Store(work / STORE_FILE)
    try:
        build_mem0(dataset.episodes, llm, embedder, conf, store)
        questions = list(dataset.questions)
        retrieved = search_memories(store, embedder, questions, k=conf.k)
        contexts = render_memories(store, retrieved)
        stats: dict[str, Any] = {"memories": {g: store.count(g) for g in dataset.groups},
                                 "deleted": {g: store.count(g, include_deleted=True) - store.count(g)
                                             for g in dataset.groups},
                                 "counters": {g: store.totals(g) for g in dataset.groups}}
    finally:
        store.close()
    if conf.graph:
        from mnemis.baselines.mem0.graph import build_graph, render_relations, search_graph

        graph, build_stats = build_graph(dataset.episodes, llm, embedder, work / GRAPH_FILE,
                                         context_window=conf.graph_context_window, max_candidates=conf.s,
                                         temperature=conf.temperature)
        try:
            hits = search_graph(graph, llm, embedder, questions, k=conf.graph_k, entity_k=conf.graph_entity_k,
                                min_similarity=conf.graph_min_similarity, include_invalid=conf.graph_include_invalid,
                                max_tokens=conf.max_tokens["query_entities"], temperature=conf.temperature)
            for i, (q, h) in enumerate(zip(questions, hits)):
                retrieved[i].facts += h
                rel = render_relations(graph, q.group_id, h)
                contexts[i] = f"Memories:\n{contexts[i] or '(none)'}\n\nRelations:\n{rel or '(none)'}"
            stats["graph"] = {"build": build_stats, "facts": {g: graph.counts(g) for g in dataset.groups}}
        finally:
            graph.close()
    return Mem0Run(conf.method, contexts, retrieved, stats)


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
