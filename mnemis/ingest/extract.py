"""Extraction for many episodes at once: entity names (+ reflection, + the speaker rule), then facts
between them (+ reflection). Every step is one batched ``generate`` over all pending episodes of all
groups; facts refer to the episode's own name list by index and are resolved later.

The output of an episode (:class:`EpisodeExtraction`) is persisted by the pipeline, so resolution after a
restart sees exactly the same input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mnemis.ingest.common import clean_name, message_text, parse_when, relation_name, run_prompt
from mnemis.prompts.extract_entities import EXTRACT_ENTITIES, REFLECT_ENTITIES, entities_schema
from mnemis.prompts.extract_facts import EXTRACT_FACTS, REFLECT_FACTS, facts_schema
from mnemis.prompts.limits import DEFAULT_LIMITS, PromptLimits
from mnemis.types import Episode, normalize_name


@dataclass
class ExtractedFactRecord:
    """A validated fact of one episode; ``source``/``target`` index the episode's ``names``."""

    source: int
    target: int
    relation: str
    fact: str
    valid_at: str | None = None  # ISO, already parsed and re-serialised
    invalid_at: str | None = None


@dataclass
class EpisodeExtraction:
    """Names (index 0 = the speaker for a non-empty message) and facts of one episode."""

    names: list[str] = field(default_factory=list)
    facts: list[ExtractedFactRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"names": list(self.names), "facts": [asdict(f) for f in self.facts]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpisodeExtraction:
        return cls(list(data.get("names", [])), [ExtractedFactRecord(**f) for f in data.get("facts", [])])


def _add_names(names: list[str], raw: Sequence[Any], stats: Counter) -> int:
    """Append the usable new names of ``raw`` to ``names``; returns how many were added."""
    seen = {normalize_name(n) for n in names}
    added = 0
    for item in raw:
        name = clean_name(item)
        if name is None:
            stats["skip.bad_entity_name"] += 1
            continue
        key = normalize_name(name)
        if key in seen:
            continue
        seen.add(key)
        names.append(name)
        added += 1
    return added


def _add_facts(ext: EpisodeExtraction, raw: Sequence[Any], stats: Counter) -> int:
    """Validate LLM facts against ``ext.names`` and append the new ones; returns how many were added."""
    seen = {(f.source, f.target, normalize_name(f.fact)) for f in ext.facts}
    n, added = len(ext.names), 0
    for item in raw:
        src, tgt = getattr(item, "source", None), getattr(item, "target", None)
        if not isinstance(src, int) or not isinstance(tgt, int) or not (0 <= src < n and 0 <= tgt < n):
            stats["skip.fact_bad_entity_index"] += 1
            continue
        if src == tgt:
            stats["skip.fact_self_loop"] += 1
            continue
        sentence = " ".join(str(getattr(item, "fact", "")).split())
        relation = relation_name(getattr(item, "relation", ""))
        if not sentence or relation is None:
            stats["skip.fact_empty"] += 1
            continue
        valid, ok_v = parse_when(getattr(item, "valid_at", ""))
        invalid, ok_i = parse_when(getattr(item, "invalid_at", ""))
        if not (ok_v and ok_i):
            stats["skip.bad_date"] += int(not ok_v) + int(not ok_i)
        if valid is not None and invalid is not None and invalid < valid:
            stats["skip.bad_date"] += 1
            invalid = None
        key = (src, tgt, normalize_name(sentence))
        if key in seen:
            continue
        seen.add(key)
        ext.facts.append(ExtractedFactRecord(
            src, tgt, relation, sentence,
            valid.isoformat() if valid else None, invalid.isoformat() if invalid else None,
        ))
        added += 1
    return added


def extract_episodes(
    episodes: Sequence[Episode],
    previous: Mapping[str, Sequence[Episode]],
    llm: Any,
    stats: Counter,
    *,
    entity_reflection_rounds: int = 1,
    fact_reflection_rounds: int = 1,
    max_tokens: Mapping[str, int],
    temperature: float = 0.0,
    limits: PromptLimits = DEFAULT_LIMITS,
) -> dict[str, EpisodeExtraction]:
    """Extract names and facts of ``episodes`` (any groups). ``previous[episode.id]`` = the context
    messages, oldest first. Episodes with empty text get an empty extraction and no LLM call.
    ``limits``: what the prompts show and how many names / facts a reply may hold."""
    out = {e.id: EpisodeExtraction() for e in episodes}
    live = [e for e in episodes if message_text(e)]
    stats["episodes.empty_text"] += len(episodes) - len(live)
    for e in live:  # the speaker rule: the speaker is always an entity, and always index 0
        if clean_name(e.speaker):
            out[e.id].names.append(clean_name(e.speaker))  # type: ignore[arg-type]
    kw = {"temperature": temperature}

    def ctx(e: Episode) -> Sequence[Episode]:
        return previous.get(e.id, ())

    def names_schemas(eps: Sequence[Episode]) -> list:
        return [entities_schema(e, limits) for e in eps]

    def facts_schemas(eps: Sequence[Episode]) -> list:
        return [facts_schema(len(out[e.id].names), limits) for e in eps]

    replies = run_prompt(llm, EXTRACT_ENTITIES, [EXTRACT_ENTITIES.render(e, ctx(e), limits) for e in live], stats,
                         max_tokens=max_tokens["extract_entities"], schemas=names_schemas(live), **kw)
    for e, rep in zip(live, replies):
        if rep is not None:
            _add_names(out[e.id].names, rep.names, stats)  # type: ignore[attr-defined]
    todo = list(live)
    for _ in range(entity_reflection_rounds):
        if not todo:
            break
        renders = [REFLECT_ENTITIES.render(e, ctx(e), out[e.id].names, limits) for e in todo]
        replies = run_prompt(llm, REFLECT_ENTITIES, renders, stats,
                             max_tokens=max_tokens["reflect_entities"], schemas=names_schemas(todo), **kw)
        nxt = []
        for e, rep in zip(todo, replies):
            if rep is not None and _add_names(out[e.id].names, rep.names, stats):  # type: ignore[union-attr]
                stats["reflection.entities_added"] += 1
                nxt.append(e)
        todo = nxt

    todo = [e for e in live if len(out[e.id].names) >= 2]
    renders = [EXTRACT_FACTS.render(e, ctx(e), out[e.id].names, limits) for e in todo]
    replies = run_prompt(llm, EXTRACT_FACTS, renders, stats, max_tokens=max_tokens["extract_facts"],
                         schemas=facts_schemas(todo), **kw)
    for e, rep in zip(todo, replies):
        if rep is not None:
            _add_facts(out[e.id], rep.facts, stats)  # type: ignore[attr-defined]
    for _ in range(fact_reflection_rounds):
        if not todo:
            break
        renders = [REFLECT_FACTS.render(e, ctx(e), out[e.id].names, [f.fact for f in out[e.id].facts], limits)
                   for e in todo]
        replies = run_prompt(llm, REFLECT_FACTS, renders, stats, max_tokens=max_tokens["reflect_facts"],
                             schemas=facts_schemas(todo), **kw)
        nxt = []
        for e, rep in zip(todo, replies):
            if rep is not None and _add_facts(out[e.id], rep.facts, stats):  # type: ignore[attr-defined]
                stats["reflection.facts_added"] += 1
                nxt.append(e)
        todo = nxt
    for ext in out.values():
        stats["extracted.names"] += len(ext.names)
        stats["extracted.facts"] += len(ext.facts)
    return out
