"""Fact (edge) extraction between an episode's entities, and its reflection (the paper).

Entities are referred to by their index in the episode's own (not yet resolved) entity list, so facts
can be extracted for every episode in parallel, before resolution; the pipeline maps indices to
resolved entities afterwards. Times are resolved against the current message's time ("now"): a date key
with the absolute dates of "yesterday", "last week", ... is computed from it, since a small model otherwise
dates "yesterday" to the message's own day. The relation is asked for as the verb of the fact's own
sentence, with no example (a 1.5B model copied the format name, then example relations, onto unrelated
facts); a relation equal to a format name fails validation and is retried with the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field, field_validator

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.extract_entities import EXTRACTION_SYSTEM, context_block, numbered
from mnemis.prompts.limits import DEFAULT_LIMITS, PromptLimits, facts_bound
from mnemis.types import Episode

MAX_FACTS = DEFAULT_LIMITS.max_facts
# indexes into the episode's name list; bounds decoding only (a reply budget needs every field bounded).
# A request's own schema (facts_schema) bounds them by the list it shows.
INDEX = {"minimum": 0, "maximum": 99}

_TASK_HEAD = (
    "Task: list the facts the CURRENT message states between two different listed entities. "
    "source/target: entity numbers; relation: the verb of that fact's own sentence, in capitals joined by "
    "underscores; fact: one plain sentence; "
)
_TASK_TAIL = " Date the event, not the message: use the date key for words like 'yesterday'."
FACT_TASK = (
    _TASK_HEAD + "valid_at/invalid_at: ISO dates (YYYY-MM-DD) when the fact starts/stops being true, or empty "
    "string if unknown." + _TASK_TAIL
)
FACT_TASK_DATETIME = (
    _TASK_HEAD + "valid_at/invalid_at: ISO 8601 date-times (YYYY-MM-DDTHH:MM:SS) when the fact starts/stops "
    "being true, or empty string if unknown; use 00:00:00 when only the day is known." + _TASK_TAIL
)
# Format names a small model tends to copy verbatim as a relation instead of naming one.
PLACEHOLDER_RELATIONS = frozenset({
    "SCREAMING_SNAKE_CASE", "SNAKE_CASE", "UPPER_SNAKE_CASE", "RELATION", "RELATION_TYPE", "RELATION_NAME",
    "VERB_PHRASE", "VERB", "RELATIONSHIP", "TYPE",
})


def date_key(now: datetime) -> str:
    """Absolute dates for the relative words a message uses, computed from its own time."""
    day = timedelta(days=1)
    monday = now - timedelta(days=now.weekday())
    return (f"Date key (CURRENT message written {now:%A %Y-%m-%d}): today = {now:%Y-%m-%d}; "
            f"yesterday = {now - day:%Y-%m-%d}; the day before yesterday = {now - 2 * day:%Y-%m-%d}; "
            f"last week = week of {monday - 7 * day:%Y-%m-%d}; last month = {now.replace(day=1) - day:%Y-%m}; "
            f"last year = {now.year - 1}.")


def fact_task(episode: Episode, limits: PromptLimits = DEFAULT_LIMITS) -> str:
    if limits.fact_dates == "datetime":
        now = f"The time now is {episode.valid_at:%Y-%m-%dT%H:%M:%S}."
        return f"{date_key(episode.valid_at)} {now}\n{FACT_TASK_DATETIME}"
    return f"{date_key(episode.valid_at)}\n{FACT_TASK}"


class ExtractedFact(BaseModel):
    source: int = Field(json_schema_extra=INDEX, description="number of the source entity in the entity list")
    target: int = Field(json_schema_extra=INDEX, description="number of the target entity in the entity list")
    relation: str = Field(json_schema_extra={"maxLength": 60},
                          description="the verb of the fact sentence in capitals joined by underscores")
    fact: str = Field(json_schema_extra={"maxLength": 300},
                      description="the fact as one self-contained sentence")
    valid_at: str = Field("", json_schema_extra={"maxLength": 32},
                          description="ISO 8601 date (or date-time) the fact became true, or empty")
    invalid_at: str = Field("", json_schema_extra={"maxLength": 32},
                            description="ISO 8601 date (or date-time) the fact stopped being true, or empty")

    @field_validator("relation")
    @classmethod
    def _not_a_placeholder(cls, value: str) -> str:
        key = "_".join(value.replace("-", " ").replace("_", " ").split()).upper()
        if key in PLACEHOLDER_RELATIONS:
            raise ValueError(f"relation {value!r} is a format name, not a relation: use the verb of this fact's "
                             "sentence, in capitals joined by underscores")
        return value


class ExtractedFacts(BaseModel):
    """Facts stated in the current message."""

    facts: list[ExtractedFact] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_FACTS})


@lru_cache(maxsize=1024)
def bounded_facts(n_entities: int, max_items: int) -> type[ExtractedFacts]:
    """``ExtractedFacts`` whose decoding schema bounds source/target by the ``n_entities`` listed entities
    (numbered from 0) and the list by ``max_items`` facts."""

    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = ExtractedFacts.model_json_schema(*args, **kwargs)
        item = schema["$defs"]["ExtractedFact"]["properties"]
        for key in ("source", "target"):
            item[key] = {**item[key], "minimum": 0, "maximum": max(0, n_entities - 1)}
        schema["properties"]["facts"]["maxItems"] = max_items
        return schema

    return type(f"ExtractedFacts{n_entities}_{max_items}", (ExtractedFacts,),
                {"model_json_schema": classmethod(model_json_schema), "__module__": __name__})


def facts_schema(n_entities: int, limits: PromptLimits = DEFAULT_LIMITS) -> type[ExtractedFacts]:
    """The decoding schema of a (reflection) fact request showing ``n_entities`` entities."""
    return bounded_facts(n_entities, facts_bound(limits, n_entities))


def render_extract_facts(
    episode: Episode, previous: Sequence[Episode], entities: Sequence[str], limits: PromptLimits = DEFAULT_LIMITS
) -> list[dict[str, str]]:
    """Messages asking for the facts of ``episode`` between ``entities`` (indexed)."""
    body = (f"{context_block(episode, previous, limits)}\nEntities:\n{numbered(entities)}\n"
            f"{fact_task(episode, limits)}")
    return [system(EXTRACTION_SYSTEM), user(body)]


def render_reflect_facts(
    episode: Episode, previous: Sequence[Episode], entities: Sequence[str], found: Sequence[str],
    limits: PromptLimits = DEFAULT_LIMITS,
) -> list[dict[str, str]]:
    """Messages asking for facts of ``episode`` missing from ``found`` (fact sentences)."""
    body = (
        f"{context_block(episode, previous, limits)}\nEntities:\n{numbered(entities)}\n"
        f"Facts already found:\n{numbered(found) if found else '(none)'}\n"
        f"{fact_task(episode, limits)} List only facts missing above; an empty list if none."
    )
    return [system(EXTRACTION_SYSTEM), user(body)]


# v2: no format name in the relation instruction (copied as a relation), a date key for relative dates;
# v3: no example relations either (Qwen2.5-Coder-1.5B applied LIVES_IN / WORKS_AT to unrelated facts)
EXTRACT_FACTS = Prompt("extract_facts", "v3", render_extract_facts, ExtractedFacts)
REFLECT_FACTS = Prompt("reflect_facts", "v3", render_reflect_facts, ExtractedFacts)
