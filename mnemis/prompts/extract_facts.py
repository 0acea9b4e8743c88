"""Fact (edge) extraction between an episode's entities, and its reflection (REFERENCE §2.2 steps 8-9).

Entities are referred to by their index in the episode's own (not yet resolved) entity list, so facts
can be extracted for every episode in parallel, before resolution; the pipeline maps indices to
resolved entities afterwards. Times are resolved against the current message's time ("now").
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.extract_entities import EXTRACTION_SYSTEM, context_block, numbered
from mnemis.types import Episode

MAX_FACTS = 8
# indexes into the episode's name list; bounds decoding only (a reply budget needs every field bounded)
INDEX = {"minimum": 0, "maximum": 99}

FACT_TASK = (
    "Task: list the facts the CURRENT message states between two different listed entities. "
    "source/target: entity numbers; relation: SCREAMING_SNAKE_CASE verb phrase; fact: one plain sentence; "
    "valid_at/invalid_at: ISO dates (YYYY-MM-DD) when it starts/stops being true, resolving words like "
    "'last week' against the CURRENT message time; empty string if unknown."
)


class ExtractedFact(BaseModel):
    source: int = Field(json_schema_extra=INDEX, description="number of the source entity in the entity list")
    target: int = Field(json_schema_extra=INDEX, description="number of the target entity in the entity list")
    relation: str = Field(json_schema_extra={"maxLength": 60},
                          description="relation type in SCREAMING_SNAKE_CASE, e.g. WORKS_AT")
    fact: str = Field(json_schema_extra={"maxLength": 300},
                      description="the fact as one self-contained sentence")
    valid_at: str = Field("", json_schema_extra={"maxLength": 32},
                          description="ISO date the fact became true, or empty")
    invalid_at: str = Field("", json_schema_extra={"maxLength": 32},
                            description="ISO date the fact stopped being true, or empty")


class ExtractedFacts(BaseModel):
    """Facts stated in the current message."""

    facts: list[ExtractedFact] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_FACTS})


def render_extract_facts(
    episode: Episode, previous: Sequence[Episode], entities: Sequence[str]
) -> list[dict[str, str]]:
    """Messages asking for the facts of ``episode`` between ``entities`` (indexed)."""
    body = f"{context_block(episode, previous)}\nEntities:\n{numbered(entities)}\n{FACT_TASK}"
    return [system(EXTRACTION_SYSTEM), user(body)]


def render_reflect_facts(
    episode: Episode, previous: Sequence[Episode], entities: Sequence[str], found: Sequence[str]
) -> list[dict[str, str]]:
    """Messages asking for facts of ``episode`` missing from ``found`` (fact sentences)."""
    body = (
        f"{context_block(episode, previous)}\nEntities:\n{numbered(entities)}\n"
        f"Facts already found:\n{numbered(found) if found else '(none)'}\n"
        f"{FACT_TASK} List only facts missing above; an empty list if none."
    )
    return [system(EXTRACTION_SYSTEM), user(body)]


EXTRACT_FACTS = Prompt("extract_facts", "v1", render_extract_facts, ExtractedFacts)
REFLECT_FACTS = Prompt("reflect_facts", "v1", render_reflect_facts, ExtractedFacts)
