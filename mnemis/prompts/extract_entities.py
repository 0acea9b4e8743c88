"""Entity-name extraction and its reflection round (REFERENCE §2.2 steps 3-4).

All base-graph extraction prompts (entities, reflection, facts) share one system message and one
context block (earlier messages, then the current message with its time), so an engine with prefix
caching reuses the episode's tokens across the stages; only the task line at the end differs.
Context messages are shortened to ``CONTEXT_WORDS`` words: they disambiguate, they are not mined.

Length bounds in these schemas (``maxItems``/``maxLength`` via ``json_schema_extra``) steer constrained
decoding only; validation does not reject a longer reply, the ingest stages trim and count instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.types import Episode

CONTEXT_WORDS = 40
MAX_NAMES = 10
MAX_NAME_CHARS = 60

EXTRACTION_SYSTEM = (
    "You turn chat messages into a knowledge graph memory. Entities are people, pets, organisations, "
    "places, objects, events, activities and clear concepts named in the CURRENT message; never pronouns, "
    "dates or feelings. Use the most complete name the conversation gives. Earlier messages are context "
    "only. Reply with JSON only."
)


def short(text: str, words: int = CONTEXT_WORDS) -> str:
    """``text`` cut to ``words`` words (with an ellipsis when cut)."""
    parts = text.split()
    return " ".join(parts) if len(parts) <= words else " ".join(parts[:words]) + " ..."


def when(episode: Episode) -> str:
    return episode.valid_at.strftime("%Y-%m-%d %H:%M")


def context_block(episode: Episode, previous: Sequence[Episode]) -> str:
    """The shared opening of every extraction prompt: earlier messages, then the current one."""
    lines = []
    if previous:
        lines.append("Earlier messages:")
        lines += [f"- {short(p.content)}" for p in previous]
    lines.append(f"CURRENT message ({when(episode)}):")
    lines.append(episode.content.strip())
    return "\n".join(lines)


def numbered(items: Sequence[str]) -> str:
    return "\n".join(f"{i}. {s}" for i, s in enumerate(items))


class ExtractedEntities(BaseModel):
    """Entity names found in the current message."""

    names: list[Annotated[str, Field(json_schema_extra={"maxLength": MAX_NAME_CHARS})]] = Field(
        default_factory=list,
        json_schema_extra={"maxItems": MAX_NAMES},
        description="distinct entity names from the current message, each 1-5 words, most complete form",
    )


def render_extract_entities(episode: Episode, previous: Sequence[Episode]) -> list[dict[str, str]]:
    """Messages asking for the entity names of ``episode`` (``previous`` = earlier messages, oldest first)."""
    task = "Task: list the entities named in the CURRENT message."
    return [system(EXTRACTION_SYSTEM), user(f"{context_block(episode, previous)}\n{task}")]


def render_reflect_entities(
    episode: Episode, previous: Sequence[Episode], found: Sequence[str]
) -> list[dict[str, str]]:
    """Messages asking which entities of ``episode`` are missing from ``found``."""
    task = (
        f"Entities already found:\n{numbered(found) if found else '(none)'}\n"
        "Task: list only entities of the CURRENT message that are missing above; an empty list if none."
    )
    return [system(EXTRACTION_SYSTEM), user(f"{context_block(episode, previous)}\n{task}")]


EXTRACT_ENTITIES = Prompt("extract_entities", "v1", render_extract_entities, ExtractedEntities)
REFLECT_ENTITIES = Prompt("reflect_entities", "v1", render_reflect_entities, ExtractedEntities)
