"""Shared pieces of the base-graph stages: build statistics, LLM request helpers, value cleaning."""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel

from mnemis.models.llm.base import LLMRequest, LLMResult, Sampling
from mnemis.prompts.base import Prompt
from mnemis.store.sqlite import GraphStore
from mnemis.types import Episode

log = logging.getLogger(__name__)

STATS_KEY = "ingest.stats"
EXTRACT_KEY = "ingest.extract:{}"
RESOLVED_KEY = "ingest.resolved:{}"
ALIASES_KEY = "ingest.aliases:{}"

# default reply budgets per stage (completion tokens); all overridable from the config
DEFAULT_MAX_TOKENS = {
    "extract_entities": 160,
    "reflect_entities": 96,
    "resolve_entities": 128,
    "entity_attributes": 192,
    "extract_facts": 512,
    "reflect_facts": 384,
    "dedup_facts": 192,
}


@dataclass
class BuildStats:
    """What one ``ingest`` call did: items created, bad replies skipped, tokens per stage.

    ``counters`` holds this call's counts (``skip.*`` = bad LLM output that was dropped,
    ``tokens.prompt.<stage>`` = prompt tokens of the replies used, cached ones included);
    ``totals`` is the cumulative record kept in the store (exact across kills and resumes, because
    every increment is committed in the same transaction as the work it describes).
    """

    episodes: int = 0
    counters: Counter = field(default_factory=Counter)
    totals: dict[str, int] = field(default_factory=dict)

    def prompt_tokens_per_episode(self) -> dict[str, float]:
        n = max(self.episodes, 1)
        return {k.removeprefix("tokens.prompt."): v / n for k, v in sorted(self.counters.items())
                if k.startswith("tokens.prompt.")}

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "counters": dict(sorted(self.counters.items())),
                "totals": dict(sorted(self.totals.items())),
                "prompt_tokens_per_episode": self.prompt_tokens_per_episode()}


def bump_stats(store: GraphStore, delta: Counter) -> None:
    """Add ``delta`` to the stored cumulative counters (call inside the batch's transaction)."""
    if not delta:
        return
    cur = Counter(store.get_meta(STATS_KEY, {}) or {})
    cur.update(delta)
    store.set_meta(STATS_KEY, {k: v for k, v in sorted(cur.items()) if v})


def run_prompt(
    llm: Any,
    prompt: Prompt,
    renders: Sequence[list[dict[str, str]]],
    stats: Counter,
    *,
    max_tokens: int,
    temperature: float = 0.0,
    schemas: Sequence[type[BaseModel]] | None = None,
) -> list[BaseModel | None]:
    """One batched ``generate`` for ``renders``; parsed replies (None for failed items, counted).
    ``schemas[i]``: the reply schema of request i (bounds from its rendered lists); default ``prompt.schema``."""
    if not renders:
        return []
    if schemas is not None and len(schemas) != len(renders):
        raise ValueError(f"{len(schemas)} schemas for {len(renders)} requests")
    sampling = Sampling(temperature=temperature, max_tokens=max_tokens)
    reqs = [LLMRequest(messages=m, schema=prompt.schema if schemas is None else schemas[i], sampling=sampling,
                       stage=prompt.stage)
            for i, m in enumerate(renders)]
    t0 = time.perf_counter()
    results: list[LLMResult] = llm.generate(reqs)
    log.debug("%s: %d requests in %.1f s", prompt.stage, len(reqs), time.perf_counter() - t0)
    out: list[BaseModel | None] = []
    for res in results:
        stats[f"tokens.prompt.{prompt.stage}"] += res.prompt_tokens
        stats[f"tokens.completion.{prompt.stage}"] += res.completion_tokens
        stats[f"calls.{prompt.stage}"] += 1
        stats[f"truncated.{prompt.stage}"] += int(res.truncated)  # cut at max_tokens ...
        stats[f"salvaged.{prompt.stage}"] += int(res.salvaged)  # ... or broken: only complete items kept
        if not res.ok or res.parsed is None:
            stats[f"skip.failed_reply.{prompt.stage}"] += 1
            out.append(None)
        else:
            out.append(res.parsed)
    return out


def round_robin(lists: Sequence[Sequence[str]], cap: int | None) -> list[str]:
    """Merge ranked lists by taking the 1st of each, then the 2nd of each, ... without repeats, up to ``cap``
    (None: the whole union)."""
    out: list[str] = []
    seen: set[str] = set()
    for depth in range(max((len(x) for x in lists), default=0)):
        for lst in lists:
            if cap is not None and len(out) >= cap:
                return out
            if depth < len(lst) and lst[depth] not in seen:
                seen.add(lst[depth])
                out.append(lst[depth])
    return out


def message_text(episode: Episode) -> str:
    """The episode's text without its ``"<speaker>:"`` prefix (empty for an empty message)."""
    text = episode.content.strip()
    prefix = f"{episode.speaker}:"
    if episode.speaker and text.startswith(prefix):
        text = text[len(prefix):].strip()
    return text


_NON_WORD = re.compile(r"[^0-9A-Za-z]+")


def clean_name(name: Any, max_chars: int = 80) -> str | None:
    """A usable entity name (single-spaced) or None for empty / overlong / non-string names."""
    if not isinstance(name, str):
        return None
    name = " ".join(name.split()).strip(" .,:;\"'")
    if not name or len(name) > max_chars or not any(ch.isalnum() for ch in name):
        return None
    return name


def relation_name(text: Any) -> str | None:
    """SCREAMING_SNAKE_CASE form of a relation type, or None if nothing is left."""
    if not isinstance(text, str):
        return None
    rel = _NON_WORD.sub("_", text.strip()).strip("_").upper()
    return rel[:60] or None


def parse_when(text: Any) -> tuple[datetime | None, bool]:
    """Parse an ISO-8601 date/time the LLM wrote: ``(value, ok)``. Empty -> ``(None, True)``;
    unparseable -> ``(None, False)``. Aware times are converted to naive UTC (episode times are naive)."""
    if text is None:
        return None, True
    if not isinstance(text, str):
        return None, False
    s = text.strip()
    if not s or s.lower() in {"null", "none", "unknown", "n/a", "present", "now"}:
        return None, True
    s = s.replace("Z", "+00:00") if s.endswith("Z") else s
    month = s + "-01" if len(s) == 7 else None
    year = s + "-01-01" if len(s) == 4 else None
    for candidate in (s, s[:10], month, year):
        if not candidate:
            continue
        try:
            value = datetime.fromisoformat(candidate)
        except ValueError:
            continue
        if not 1900 <= value.year <= 2200:
            return None, False
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value, True
    return None, False


def progress(iterable: Iterable, *, total: int, desc: str, enabled: bool | None) -> Iterable:
    """Counts, rate and ETA over ``iterable`` (``mnemis.progress``: a bar on a TTY, else plain log lines);
    ``enabled=False`` shows nothing, ``True`` forces the bar."""
    if enabled is False:
        return iterable
    from mnemis.progress import track

    return track(iterable, total=total, stage=desc, tty=True if enabled else None)
