"""Mem0 extraction phase: message pairs, the periodic conversation summary, candidate facts.

A group's messages (sorted by position) are cut into consecutive, non-overlapping pairs
``(m[t-1], m[t])``; every message is "new" exactly once. The extraction prompt of a pair holds the
group's current summary, the ``m`` messages before the pair and the pair. The summary is refreshed by
its own stage, before the extraction of a pair, once ``summary_every`` messages have accumulated since
the previous refresh; all groups due at a step are summarised in one ``generate``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.prompts.base import Prompt
from mnemis.prompts.mem0_extract import MEM0_EXTRACT
from mnemis.prompts.mem0_summary import MEM0_SUMMARY
from mnemis.types import Episode

_ENUM = re.compile(r"^(?:[-*•]|\d+[.)])\s+")


@dataclass
class Pair:
    """One unit of ingestion: ``messages`` (1-2 episodes) starting at ``start`` in the group's order."""

    group_id: str
    start: int
    messages: list[Episode]

    @property
    def id(self) -> str:
        return self.messages[-1].id

    @property
    def time(self) -> datetime:
        return self.messages[-1].valid_at

    @property
    def end(self) -> int:
        return self.start + len(self.messages)


def sorted_messages(episodes: Sequence[Episode]) -> list[Episode]:
    return sorted(episodes, key=lambda e: (e.position, e.id))


def make_pairs(episodes: Sequence[Episode], size: int = 2) -> list[Pair]:
    """Consecutive non-overlapping pairs of one group's messages (the last one may be a single)."""
    msgs = sorted_messages(episodes)
    if not msgs:
        return []
    gid = msgs[0].group_id
    return [Pair(gid, i, msgs[i:i + size]) for i in range(0, len(msgs), size)]


def _generate(llm: Any, prompt: Prompt, renders: Sequence[list[dict[str, str]]], *, max_tokens: int,
              temperature: float) -> list[Any]:
    """One batched ``generate``; returns the LLM results in order."""
    if not renders:
        return []
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
    return llm.generate([LLMRequest(messages=r, schema=prompt.schema, sampling=sampling, stage=prompt.stage)
                         for r in renders])


def summary_due(covered: int, pair: Pair, every: int) -> bool:
    """Whether the summary (covering the first ``covered`` messages) must be refreshed before ``pair``."""
    return every > 0 and pair.start - covered >= every


def refresh_summaries(
    jobs: Sequence[tuple[str, str, list[Episode], int]],
    llm: Any,
    counters: dict[str, Counter],
    *,
    max_tokens: int = 320,
    temperature: float = 0.0,
) -> dict[str, tuple[str, int]]:
    """``jobs`` = ``(group, previous summary, messages since it, new covered count)``; one ``generate``.

    Returns ``group -> (new summary, covered)``; a failed item keeps the previous summary (counted)
    but still advances ``covered`` so a bad reply is not retried at every step."""
    results = _generate(llm, MEM0_SUMMARY, [MEM0_SUMMARY.render(prev, msgs) for _, prev, msgs, _ in jobs],
                        max_tokens=max_tokens, temperature=temperature)
    out = {}
    for (g, prev, _, covered), res in zip(jobs, results):
        c = counters.setdefault(g, Counter())
        c["summary.refreshes"] += 1
        text = res.parsed.summary.strip() if res.ok and res.parsed is not None else ""
        if not text:
            c["bad.summary_failed"] += 1
            text = prev
        out[g] = (text, covered)
    return out


def extract_facts(
    jobs: Sequence[tuple[Pair, str, list[Episode]]],
    llm: Any,
    counters: dict[str, Counter],
    *,
    max_facts: int = 10,
    max_tokens: int = 384,
    temperature: float = 0.0,
) -> list[list[str]]:
    """Candidate facts for each ``(pair, summary, recent messages)`` job; one ``generate`` for all.

    Pairs whose messages are all empty get no request. List markers ("1. ", "- ") are stripped, facts
    without a word (e.g. only a date) dropped, the rest de-duplicated (case and spacing) and cut to
    ``max_facts``; a failed reply gives no facts (counted under ``bad.extract_failed``)."""
    live = [i for i, (p, _, _) in enumerate(jobs) if any(m.content.strip() for m in p.messages)]
    results = _generate(llm, MEM0_EXTRACT, [MEM0_EXTRACT.render(jobs[i][1], jobs[i][2], jobs[i][0].messages)
                                            for i in live], max_tokens=max_tokens, temperature=temperature)
    out: list[list[str]] = [[] for _ in jobs]
    for i, res in zip(live, results):
        c = counters.setdefault(jobs[i][0].group_id, Counter())
        if not res.ok or res.parsed is None:
            c["bad.extract_failed"] += 1
            continue
        seen: set[str] = set()
        for raw in res.parsed.facts:
            fact = _ENUM.sub("", " ".join(str(raw).split()))
            key = fact.casefold()
            if not any(ch.isalpha() for ch in fact):  # empty, or only a date/number
                c["extract.skipped_no_words"] += int(bool(fact))
                continue
            if key not in seen:
                seen.add(key)
                out[i].append(fact)
        if len(out[i]) > max_facts:
            c["extract.facts_cut"] += len(out[i]) - max_facts
            out[i] = out[i][:max_facts]
        c["extract.facts"] += len(out[i])
    return out
