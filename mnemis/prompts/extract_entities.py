"""Entity-name extraction and its reflection round (the paper).

All base-graph extraction prompts (entities, reflection, facts) share one system message and one
context block (earlier messages, then the current message with its time), so an engine with prefix
caching reuses the episode's tokens across the stages; only the task line at the end differs.
Context messages are shortened to ``limits.context_words`` words (40 by default; whole in paper mode):
they disambiguate, they are not mined.

Length bounds in these schemas (``maxItems``/``maxLength`` via ``json_schema_extra``) steer constrained
decoding only; validation does not reject a longer reply, the ingest stages trim and count instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.limits import DEFAULT_LIMITS, PromptLimits, cut_words, names_bound
from mnemis.types import Episode

CONTEXT_WORDS = DEFAULT_LIMITS.context_words
MAX_NAMES = DEFAULT_LIMITS.max_names
MAX_NAME_CHARS = 60

EXTRACTION_SYSTEM = (
    "You turn chat messages into a knowledge graph memory. Entities are people, pets, organisations, "
    "places, objects, events, activities and clear concepts named in the CURRENT message; never pronouns, "
    "dates or feelings. Use the most complete name the conversation gives. Earlier messages are context "
    "only. Reply with JSON only."
)


def short(text: str, words: int | None = CONTEXT_WORDS) -> str:
    """``text`` cut to ``words`` words (with an ellipsis when cut; ``None`` keeps it whole)."""
    return cut_words(text, words)


def when(episode: Episode) -> str:
    return episode.valid_at.strftime("%Y-%m-%d %H:%M")


def context_block(episode: Episode, previous: Sequence[Episode], limits: PromptLimits = DEFAULT_LIMITS) -> str:
    """The shared opening of every extraction prompt: earlier messages, then the current one."""
    lines = []
    if previous:
        lines.append("Earlier messages:")
        lines += [f"- {short(p.content, limits.context_words)}" for p in previous]
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


@lru_cache(maxsize=1024)
def names_schema(max_items: int) -> type[ExtractedEntities]:
    """``ExtractedEntities`` whose decoding schema allows ``max_items`` names (the class itself for the
    default bound, so our default requests keep their schema)."""
    if max_items == MAX_NAMES:
        return ExtractedEntities

    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = ExtractedEntities.model_json_schema(*args, **kwargs)
        schema["properties"]["names"]["maxItems"] = max_items
        return schema

    return type(f"ExtractedEntities{max_items}", (ExtractedEntities,),
                {"model_json_schema": classmethod(model_json_schema), "__module__": __name__})


def entities_schema(episode: Episode, limits: PromptLimits = DEFAULT_LIMITS) -> type[ExtractedEntities]:
    """The decoding schema of one episode's (reflection) extraction request under ``limits``."""
    return names_schema(names_bound(limits, episode.content))


def render_extract_entities(episode: Episode, previous: Sequence[Episode],
                            limits: PromptLimits = DEFAULT_LIMITS) -> list[dict[str, str]]:
    """Messages asking for the entity names of ``episode`` (``previous`` = earlier messages, oldest first)."""
    task = "Task: list the entities named in the CURRENT message."
    return [system(EXTRACTION_SYSTEM), user(f"{context_block(episode, previous, limits)}\n{task}")]


def render_reflect_entities(
    episode: Episode, previous: Sequence[Episode], found: Sequence[str], limits: PromptLimits = DEFAULT_LIMITS
) -> list[dict[str, str]]:
    """Messages asking which entities of ``episode`` are missing from ``found``."""
    task = (
        f"Entities already found:\n{numbered(found) if found else '(none)'}\n"
        "Task: list only entities of the CURRENT message that are missing above; an empty list if none."
    )
    return [system(EXTRACTION_SYSTEM), user(f"{context_block(episode, previous, limits)}\n{task}")]


EXTRACT_ENTITIES = Prompt("extract_entities", "v1", render_extract_entities, ExtractedEntities)
REFLECT_ENTITIES = Prompt("reflect_entities", "v1", render_reflect_entities, ExtractedEntities)
