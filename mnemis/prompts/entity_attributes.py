"""Entity summary and tags (REFERENCE §2.2 step 7; tags as in Mnemis: ≤5 descriptors of ≤3 words)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.extract_entities import short

MAX_TAGS = 5
TAG_WORDS = 3
MAX_SUMMARY_CHARS = 400
MAX_TAG_CHARS = 40  # decoding bound only; clean_tags trims to TAG_WORDS words

ATTRIBUTES_SYSTEM = (
    "You write entity profiles for a knowledge graph memory. The summary states, in at most two sentences, "
    "what the messages and facts say about the entity (nothing invented). Tags are up to 5 short type or "
    "role descriptors of at most 3 words, e.g. 'Person', 'Pet dog', 'Art hobby'. Reply with JSON only."
)


class EntityAttributes(BaseModel):
    summary: str = Field(json_schema_extra={"maxLength": MAX_SUMMARY_CHARS},
                         description="at most two sentences about the entity")
    tags: list[Annotated[str, Field(json_schema_extra={"maxLength": MAX_TAG_CHARS})]] = Field(
                            default_factory=list, json_schema_extra={"maxItems": MAX_TAGS},
                            description="up to 5 type/role descriptors of at most 3 words each")


def render_entity_attributes(
    name: str, summary: str, messages: Sequence[str], facts: Sequence[str]
) -> list[dict[str, str]]:
    """Messages asking for ``name``'s summary and tags from its previous ``summary``, some
    ``messages`` that mention it (already dated) and facts about it."""
    parts = [f"Entity: {name}"]
    if summary:
        parts.append(f"Current summary: {summary}")
    if messages:
        parts.append("Messages:\n" + "\n".join(f"- {short(m, 50)}" for m in messages))
    if facts:
        parts.append("Facts:\n" + "\n".join(f"- {f}" for f in facts))
    parts.append("Task: write the summary and tags of the entity.")
    return [system(ATTRIBUTES_SYSTEM), user("\n".join(parts))]


def clean_tags(tags: Sequence[str]) -> list[str]:
    """At most ``MAX_TAGS`` distinct non-empty tags, each cut to ``TAG_WORDS`` words."""
    out: list[str] = []
    for t in tags:
        t = " ".join(str(t).split()[:TAG_WORDS])
        if t and t.casefold() not in {o.casefold() for o in out}:
            out.append(t)
    return out[:MAX_TAGS]


ENTITY_ATTRIBUTES = Prompt("entity_attributes", "v1", render_entity_attributes, EntityAttributes)
