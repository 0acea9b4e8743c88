"""Entity resolution: does a newly extracted name denote an entity already in memory? (REFERENCE §2.2 step 5)

One request per episode covers all its names that had no exact match; the candidates are existing
entities of the same group found by name embedding and BM25. One decision per new name.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.extract_entities import short

RESOLVE_SYSTEM = (
    "You merge duplicate entities in a knowledge graph memory. A new name matches a known entity only if "
    "both surely denote the same real person, thing or place (e.g. a nickname or fuller name); related or "
    "similar is not enough. Reply with JSON only."
)


# decoding bounds only (validation stays lax; the stage counts out-of-range numbers)
NEW, MATCH = {"minimum": 0, "maximum": 99}, {"minimum": -1, "maximum": 99}


class Resolution(BaseModel):
    new: int = Field(json_schema_extra=NEW, description="number of the new name")
    match: int = Field(-1, json_schema_extra=MATCH,
                       description="number of the known entity it is the same as, or -1 if none")


class Resolutions(BaseModel):
    """One decision per new name."""

    decisions: list[Resolution] = Field(default_factory=list, json_schema_extra={"maxItems": 16})


def render_resolve_entities(
    message: str, new_names: Sequence[str], candidates: Sequence[tuple[str, str]]
) -> list[dict[str, str]]:
    """Messages deciding ``new_names`` (from ``message``) against ``candidates`` = (name, summary) pairs."""
    known = "\n".join(
        f"{i}. {name}" + (f" - {short(summary, 15)}" if summary else "")
        for i, (name, summary) in enumerate(candidates)
    )
    new = "\n".join(f"{i}. {n}" for i, n in enumerate(new_names))
    body = (
        f"Message: {short(message, 60)}\nKnown entities:\n{known}\nNew names:\n{new}\n"
        "Task: for each new name give the number of the known entity it is the same as, or -1."
    )
    return [system(RESOLVE_SYSTEM), user(body)]


RESOLVE_ENTITIES = Prompt("resolve_entities", "v1", render_resolve_entities, Resolutions)
