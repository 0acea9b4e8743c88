"""Entity summary and tags (the paper's base graph; tags as in Mnemis: ≤5 descriptors of ≤3 words).

Two prompts share the stage ``entity_attributes`` (and its reply budget and schema):

- ``ENTITY_ATTRIBUTES``: one rewrite from the previous summary and a sample of the entity's new
  mentioning messages and facts (``ingest.attribute_refresh=end``, once per ``ingest`` call);
- ``ENTITY_ATTRIBUTES_UPDATE``: the Graphiti/Mnemis update after each episode: the previous summary
  and tags plus that one message (with its earlier context) and the facts it gave about the entity, so
  the summary accumulates message by message (``ingest.attribute_refresh=episode``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.extract_entities import context_block, short
from mnemis.prompts.limits import DEFAULT_LIMITS, PromptLimits
from mnemis.types import Episode

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


UPDATE_SYSTEM = (
    "You keep the entity profiles of a knowledge graph memory up to date, one message at a time. Rewrite "
    "the entity's summary so that it keeps what the current summary says (unless the new message corrects "
    "it) and adds what the CURRENT message and its facts say about the entity; nothing invented, at most "
    f"{MAX_SUMMARY_CHARS} characters, so condense older details rather than drop them. Tags are up to 5 "
    "short type or role descriptors of at most 3 words, e.g. 'Person', 'Pet dog', 'Art hobby'; keep the "
    "current ones unless the message shows better ones. Reply with JSON only."
)


def render_entity_update(
    name: str,
    summary: str,
    tags: Sequence[str],
    episode: Episode,
    previous: Sequence[Episode],
    facts: Sequence[str],
    limits: PromptLimits = DEFAULT_LIMITS,
) -> list[dict[str, str]]:
    """Messages updating ``name``'s ``summary`` and ``tags`` with what ``episode`` (after its earlier
    messages ``previous``, shown as context) and its ``facts`` about the entity add. The messages come
    first, so the requests for the entities of one episode share their prefix (prefix caching)."""
    parts = [context_block(episode, previous, limits), f"Entity: {name}", f"Current summary: {summary or '(none yet)'}"]
    if tags:
        parts.append(f"Current tags: {', '.join(tags)}")
    if facts:
        parts.append("Facts from the CURRENT message:\n" + "\n".join(f"- {f}" for f in facts))
    parts.append("Task: write the updated summary and tags of the entity.")
    return [system(UPDATE_SYSTEM), user("\n".join(parts))]


ENTITY_ATTRIBUTES_UPDATE = Prompt("entity_attributes", "update-v1", render_entity_update, EntityAttributes)
