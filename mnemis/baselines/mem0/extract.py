"""Mem0 extraction phase: message pairs, the periodic conversation summary, candidate facts.

A group's messages are cut into consecutive, non-overlapping pairs ``(m[t-1], m[t])`` **inside each
session** (as the Mem0 LoCoMo evaluation adds each session's messages two at a time), so a session of
odd length ends with a single message and no pair joins the last turn of one session to the first turn
of the next. Every message is "new" exactly once.

The extraction prompt of a pair holds the group's current summary, the ``m`` messages before the pair
and the pair. The summary (one per group, shared by the group's memory stores) is refreshed by its own
stage before the extraction of a pair, either once ``summary_every`` messages have accumulated since the
previous refresh or when the ``m``-message window would otherwise leave a message seen by neither:
every earlier message is in the summary or in the window. All groups due at a step are summarised in one
``generate``.

Over-long replies are trimmed at a word boundary and counted (``extract.facts_trimmed``,
``summary.trimmed``), never rejected.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.prompts.mem0_extract import MAX_FACT_CHARS, MEM0_EXTRACT, candidate_facts_schema
from mnemis.prompts.mem0_summary import MAX_SUMMARY_CHARS, MEM0_SUMMARY
from mnemis.types import Episode

_ENUM = re.compile(r"^(?:[-*•]|\d+[.)])\s+")


@dataclass
class Pair:
    """One unit of ingestion: ``messages`` (1-2 episodes of one session) starting at ``start`` in the
    group's order."""

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

    def speakers(self) -> set[str]:
        return {m.speaker for m in self.messages}


@dataclass
class ExtractJob:
    """One extraction request: ``pair`` mined for the memory store ``store`` (of ``speaker`` when the
    memory is kept per speaker), with the group's ``summary`` and the ``recent`` messages as context."""

    store: str
    pair: Pair
    summary: str
    recent: list[Episode]
    speaker: str | None = None


def sorted_messages(episodes: Sequence[Episode]) -> list[Episode]:
    return sorted(episodes, key=lambda e: (e.position, e.id))


def make_pairs(episodes: Sequence[Episode], size: int = 2) -> list[Pair]:
    """Consecutive non-overlapping groups of ``size`` messages of one group, cut inside each session
    (a session's last group may be shorter)."""
    msgs = sorted_messages(episodes)
    pairs: list[Pair] = []
    i = 0
    while i < len(msgs):
        j = i + 1
        while j < len(msgs) and j - i < size and msgs[j].session == msgs[i].session:
            j += 1
        pairs.append(Pair(msgs[i].group_id, i, msgs[i:j]))
        i = j
    return pairs


def speakers_of(messages: Sequence[Episode]) -> list[str]:
    """The distinct non-empty speakers of ``messages`` in order of first appearance."""
    return list(dict.fromkeys(m.speaker for m in messages if m.speaker))


def clip(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_chars`` characters at a word boundary; (text, whether it was cut)."""
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars + 1].rsplit(" ", 1)[0] if " " in text[:max_chars + 1] else text[:max_chars]
    return cut[:max_chars].rstrip(" ,;:-"), True


def _generate(llm: Any, schema: Any, stage: str, renders: Sequence[list[dict[str, str]]], *, max_tokens: int,
              temperature: float) -> list[Any]:
    """One batched ``generate``; returns the LLM results in order."""
    if not renders:
        return []
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
    return llm.generate([LLMRequest(messages=r, schema=schema, sampling=sampling, stage=stage) for r in renders])


def summary_due(covered: int, pair: Pair, every: int, window: int = 0) -> bool:
    """Whether the summary (covering the first ``covered`` messages) must be refreshed before ``pair``:
    ``every`` messages have passed since, or the ``window`` messages before the pair would not reach back
    to the summary's end (a message in neither). Never with ``every == 0`` (no summary)."""
    if every <= 0 or pair.start <= covered:
        return False
    return pair.start - covered >= every or pair.start - window > covered


def refresh_summaries(
    jobs: Sequence[tuple[str, str, list[Episode], int]],
    llm: Any,
    counters: dict[str, Counter],
    *,
    max_tokens: int = 320,
    temperature: float = 0.0,
) -> dict[str, tuple[str, int]]:
    """``jobs`` = ``(group, previous summary, messages since it, new covered count)``; one ``generate``.

    Returns ``group -> (new summary, covered)``; a failed item keeps the previous summary (counted under
    ``bad.summary_failed``) but still advances ``covered`` so a bad reply is not retried at every step; a
    summary over ``MAX_SUMMARY_CHARS`` is trimmed (``summary.trimmed``)."""
    results = _generate(llm, MEM0_SUMMARY.schema, MEM0_SUMMARY.stage,
                        [MEM0_SUMMARY.render(prev, msgs) for _, prev, msgs, _ in jobs],
                        max_tokens=max_tokens, temperature=temperature)
    out = {}
    for (g, prev, _, covered), res in zip(jobs, results):
        c = counters.setdefault(g, Counter())
        c["summary.refreshes"] += 1
        text = " ".join(res.parsed.summary.split()) if res.ok and res.parsed is not None else ""
        if not text:
            c["bad.summary_failed"] += 1
            text = prev
        text, cut = clip(text, MAX_SUMMARY_CHARS)
        c["summary.trimmed"] += int(cut)
        out[g] = (text, covered)
    return out


def extract_facts(
    jobs: Sequence[ExtractJob],
    llm: Any,
    counters: dict[str, Counter],
    *,
    max_facts: int = 8,
    max_tokens: int = 384,
    temperature: float = 0.0,
) -> list[list[str]]:
    """Candidate facts of every job; one ``generate`` for all (counters keyed by the job's store).

    Jobs whose pair has no text (from the job's speaker, when set) get no request. List markers ("1. ",
    "- ") are stripped, facts without a word (e.g. only a date) dropped, the rest de-duplicated (case and
    spacing), each trimmed to ``MAX_FACT_CHARS`` (``extract.facts_trimmed``) and the list cut to
    ``max_facts`` (``extract.facts_cut``); a failed reply gives no facts (``bad.extract_failed``)."""
    live = [i for i, j in enumerate(jobs)
            if any(m.content.strip() and (j.speaker is None or m.speaker == j.speaker) for m in j.pair.messages)]
    schema = candidate_facts_schema(max_facts)
    results = _generate(llm, schema, MEM0_EXTRACT.stage,
                        [MEM0_EXTRACT.render(jobs[i].summary, jobs[i].recent, jobs[i].pair.messages, jobs[i].speaker)
                         for i in live], max_tokens=max_tokens, temperature=temperature)
    out: list[list[str]] = [[] for _ in jobs]
    for i, res in zip(live, results):
        c = counters.setdefault(jobs[i].store, Counter())
        if not res.ok or res.parsed is None:
            c["bad.extract_failed"] += 1
            continue
        seen: set[str] = set()
        for raw in res.parsed.facts:
            fact = _ENUM.sub("", " ".join(str(raw).split()))
            if not any(ch.isalpha() for ch in fact):  # empty, or only a date/number
                c["extract.skipped_no_words"] += int(bool(fact))
                continue
            fact, cut = clip(fact, MAX_FACT_CHARS)
            key = fact.casefold()
            if key not in seen:
                c["extract.facts_trimmed"] += int(cut)
                seen.add(key)
                out[i].append(fact)
        if len(out[i]) > max_facts:
            c["extract.facts_cut"] += len(out[i]) - max_facts
            out[i] = out[i][:max_facts]
        c["extract.facts"] += len(out[i])
    return out
