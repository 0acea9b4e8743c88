"""Entity resolution: does a newly extracted name denote an entity already in memory? (the paper)

One request per episode covers all its names that had no exact match; the candidates are existing
entities of the same group found by name embedding and BM25. One decision per new name.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.limits import DEFAULT_LIMITS, PromptLimits, cut_words

RESOLVE_SYSTEM = (
    "You merge duplicate entities in a knowledge graph memory. A new name matches a known entity only if "
    "both surely denote the same real person, thing or place (e.g. a nickname or fuller name); related or "
    "similar is not enough. Reply with JSON only."
)


# decoding bounds only (validation stays lax; the stage counts out-of-range numbers); a request's own schema
# (resolutions_schema) bounds every number by the list it shows
NEW, MATCH = {"minimum": 0, "maximum": 99}, {"minimum": -1, "maximum": 99}


class Resolution(BaseModel):
    new: int = Field(json_schema_extra=NEW, description="number of the new name")
    match: int = Field(-1, json_schema_extra=MATCH,
                       description="number of the known entity it is the same as, or -1 if none")


class Resolutions(BaseModel):
    """One decision per new name."""

    decisions: list[Resolution] = Field(default_factory=list, json_schema_extra={"maxItems": 16})


@lru_cache(maxsize=1024)
def resolutions_schema(n_new: int, n_known: int) -> type[Resolutions]:
    """``Resolutions`` whose decoding schema bounds every number by the lists a request shows: ``new`` by
    the ``n_new`` new names, ``match`` by the ``n_known`` known entities (or -1), one decision per name."""

    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = Resolutions.model_json_schema(*args, **kwargs)
        item = schema["$defs"]["Resolution"]["properties"]
        item["new"] = {**item["new"], "minimum": 0, "maximum": max(0, n_new - 1)}
        item["match"] = {**item["match"], "minimum": -1, "maximum": n_known - 1}
        schema["properties"]["decisions"]["maxItems"] = max(1, n_new)
        return schema

    return type(f"Resolutions{n_new}_{n_known}", (Resolutions,),
                {"model_json_schema": classmethod(model_json_schema), "__module__": __name__})


def render_resolve_entities(
    message: str, new_names: Sequence[str], candidates: Sequence[tuple[str, str]],
    limits: PromptLimits = DEFAULT_LIMITS,
) -> list[dict[str, str]]:
    """Messages deciding ``new_names`` (from ``message``) against ``candidates`` = (name, summary) pairs."""
    known = "\n".join(
        f"{i}. {name}" + (f" - {cut_words(summary, limits.summary_words)}" if summary else "")
        for i, (name, summary) in enumerate(candidates)
    )
    new = "\n".join(f"{i}. {n}" for i, n in enumerate(new_names))
    body = (
        f"Message: {cut_words(message, limits.message_words)}\nKnown entities:\n{known}\nNew names:\n{new}\n"
        "Task: for each new name give the number of the known entity it is the same as, or -1."
    )
    return [system(RESOLVE_SYSTEM), user(body)]


RESOLVE_ENTITIES = Prompt("resolve_entities", "v1", render_resolve_entities, Resolutions)
