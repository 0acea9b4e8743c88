"""Mem0 update phase: for each candidate fact, the ``s`` most similar memories and one LLM decision
(ADD / UPDATE / DELETE / NOOP), applied at once and logged in the history table.

The facts of one message pair are decided **in sequence** (the paper's Algorithm 1): fact *j* is shown
the memories as fact *j-1* left them, new and rewritten memories already re-embedded, so two facts that
update one memory both reach its text, and a fact never targets a memory deleted earlier in the pair.
:func:`update_step` handles one message pair per memory store and stays batched across stores: round
*j* makes one ``generate`` for the *j*-th fact of every store that has one, then one ``encode`` for the
memories that round changed. Bad decisions (unknown operation, an id not in the list shown, an UPDATE
without text, a failed reply) are counted under ``bad.<reason>``, logged as NOOP with that reason, and
never raise; a memory text over ``MAX_MEMORY_CHARS`` is trimmed and counted (``update.text_trimmed``), one
without a letter (only a date) counts as no text (``update.text_no_words``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from mnemis.baselines.mem0.extract import clip
from mnemis.baselines.mem0.store import HistoryRow, Mem0Store, Memory
from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.prompts.mem0_update import MAX_MEMORY_CHARS, MEM0_UPDATE, OPERATIONS
from mnemis.types import normalize_name, stable_id


class GroupMemories:
    """The live memories of one memory store (``group_id`` = the store key) with their vectors (what
    retrieval during the update sees)."""

    def __init__(self, store: Mem0Store, group_id: str) -> None:
        self.group_id = group_id
        self.mem: dict[str, Memory] = {m.id: m for m in store.memories(group_id)}
        self.seq = store.next_seq(group_id)
        self._ids: list[str] = []
        self._mat: np.ndarray | None = None
        self.dirty = True

    def similar(self, vec: np.ndarray, s: int) -> list[str]:
        """Ids of the ``s`` live memories closest to ``vec`` (cosine), best first."""
        if self.dirty:  # rebuilt after every applied decision round
            self._ids = [i for i, m in self.mem.items() if not m.deleted and m.vec.size]
            self._mat = np.stack([self.mem[i].vec for i in self._ids]) if self._ids else None
            self.dirty = False
        if self._mat is None or s <= 0:
            return []
        scores = self._mat @ np.asarray(vec, dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:s]
        return [self._ids[j] for j in order]

    def live_texts(self) -> set[str]:
        return {normalize_name(m.text) for m in self.mem.values() if not m.deleted}


@dataclass
class PairFacts:
    """Candidate facts of one message pair of one group."""

    state: GroupMemories
    pair_id: str
    episode_ids: list[str]
    time: datetime
    facts: list[str]


@dataclass
class UpdateOutcome:
    group_id: str
    pair_id: str
    changed: dict[str, Memory] = field(default_factory=dict)
    history: list[HistoryRow] = field(default_factory=list)
    counters: Counter = field(default_factory=Counter)


def _record(out: UpdateOutcome, item: PairFacts, op: str, mid: str | None, old: str | None, new: str | None,
            fact: str, reason: str = "") -> None:
    out.history.append(HistoryRow(item.state.group_id, item.state.seq, mid, op, old, new, item.time,
                                  item.pair_id, fact, reason))
    item.state.seq += 1
    out.counters[f"op.{op}"] += 1
    if reason:
        out.counters[f"bad.{reason}"] += 1


def op_of(decision: Any) -> str:
    return str(getattr(decision, "operation", "")).strip().upper()


def apply_decision(out: UpdateOutcome, item: PairFacts, index: int, shown: Sequence[str], decision: Any) -> None:
    """Apply one decision for ``item.facts[index]`` to ``item.state`` and log it (see module docstring)."""
    fact, state = item.facts[index], item.state
    state.dirty = True
    if decision is None:
        _record(out, item, "NOOP", None, None, None, fact, "failed_reply")
        return
    op = op_of(decision)
    text, cut = clip(" ".join(str(getattr(decision, "text", "") or "").split()), MAX_MEMORY_CHARS)
    out.counters["update.text_trimmed"] += int(cut and op in ("ADD", "UPDATE"))
    if text and not any(ch.isalpha() for ch in text):  # e.g. only a date: no memory text (ADD keeps the fact)
        out.counters["update.text_no_words"] += int(op in ("ADD", "UPDATE"))
        text = ""
    target = getattr(decision, "id", -1)
    if op not in OPERATIONS:
        _record(out, item, "NOOP", None, None, None, fact, "unknown_op")
        return
    if op == "NOOP":
        mid = shown[target] if isinstance(target, int) and 0 <= target < len(shown) else None
        _record(out, item, "NOOP", mid, None, None, fact)
        return
    if op == "ADD":
        text = text or fact
        if normalize_name(text) in state.live_texts():
            _record(out, item, "NOOP", None, None, text, fact, "duplicate_add")
            return
        mid = stable_id("mem", state.group_id, item.pair_id, str(index))
        mem = Memory(state.group_id, mid, text, item.time, item.time, False, list(item.episode_ids),
                     np.zeros(0, dtype=np.float32))
        state.mem[mid] = mem
        out.changed[mid] = mem
        _record(out, item, "ADD", mid, None, text, fact)
        return
    if not isinstance(target, int) or not 0 <= target < len(shown):
        _record(out, item, "NOOP", None, None, None, fact, "bad_id")
        return
    mid = shown[target]
    mem = state.mem.get(mid)
    if mem is None or mem.deleted:
        _record(out, item, "NOOP", mid, None, None, fact, "target_gone")
        return
    if op == "UPDATE":
        if not text:
            _record(out, item, "NOOP", mid, mem.text, None, fact, "empty_text")
            return
        old = mem.text
        mem.text, mem.updated_at = text, item.time
        mem.episode_ids += [e for e in item.episode_ids if e not in mem.episode_ids]
        mem.vec = np.zeros(0, dtype=np.float32)  # re-embedded at the end of the round
        out.changed[mid] = mem
        _record(out, item, "UPDATE", mid, old, text, fact)
        return
    mem.deleted, mem.updated_at = True, item.time  # DELETE: soft, the text stays in the row and the history
    out.changed[mid] = mem
    _record(out, item, "DELETE", mid, mem.text, None, fact)


def update_step(
    items: Sequence[PairFacts],
    llm: Any,
    embedder: Any,
    *,
    s: int = 10,
    max_tokens: int = 192,
    temperature: float = 0.0,
) -> list[UpdateOutcome]:
    """Decide and apply the update of every candidate fact of ``items`` (at most one item per store):
    one round per fact index, each one ``generate`` over all stores, see the module docstring."""
    if len({it.state.group_id for it in items}) != len(items):
        raise ValueError("update_step takes at most one message pair per memory store")
    facts = [f for it in items for f in it.facts]
    vecs = embedder.encode(facts) if facts else np.zeros((0, 1), dtype=np.float32)
    offsets = np.cumsum([0] + [len(it.facts) for it in items])
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
    outcomes = [UpdateOutcome(it.state.group_id, it.pair_id) for it in items]
    for j in range(max((len(it.facts) for it in items), default=0)):
        active = [i for i, it in enumerate(items) if j < len(it.facts)]
        shown_lists = [items[i].state.similar(vecs[offsets[i] + j], s) for i in active]
        requests = [LLMRequest(messages=MEM0_UPDATE.render(items[i].facts[j], items[i].time.strftime("%Y-%m-%d"),
                                                           [items[i].state.mem[m].text for m in shown]),
                               schema=MEM0_UPDATE.schema, sampling=sampling, stage=MEM0_UPDATE.stage)
                    for i, shown in zip(active, shown_lists)]
        results = llm.generate(requests)
        changed: list[Memory] = []
        for i, shown, res in zip(active, shown_lists, results):
            out = outcomes[i]
            out.counters["tokens.prompt"] += res.prompt_tokens
            out.counters["tokens.completion"] += res.completion_tokens
            apply_decision(out, items[i], j, shown, res.parsed if res.ok else None)
            changed += [m for m in out.changed.values() if m.vec.size == 0]
        if changed:  # embedded before the next round looks up similar memories
            for m, v in zip(changed, embedder.encode([m.text for m in changed])):
                m.vec = np.asarray(v, dtype=np.float32)
    return outcomes


def commit_update(store: Mem0Store, outcomes: Sequence[UpdateOutcome], extra: dict[str, Counter] | None = None) -> None:
    """Write one step (memories, history, pair progress, counters) in one transaction."""
    with store.transaction():
        for out in outcomes:
            if out.changed:
                store.put_memories(list(out.changed.values()))
            if out.history:
                store.add_history(out.history)
            store.mark_done("pair", out.group_id, [out.pair_id])
            counters = Counter(out.counters)
            counters.update((extra or {}).get(out.group_id, Counter()))
            store.bump(out.group_id, counters)
