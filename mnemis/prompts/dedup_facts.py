"""Fact dedup and contradiction (the paper): new facts of one episode against the
existing facts that share their entities or are semantically close (one request per episode)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.resolve_entities import MATCH, NEW

DEDUP_SYSTEM = (
    "You keep a knowledge graph memory consistent. A new fact duplicates an existing fact when it states "
    "the same information (rewording is fine, different values are not). It contradicts an existing fact "
    "when both cannot be true at the same time, so the existing one stopped being true. Reply with JSON only."
)


class FactDecision(BaseModel):
    new: int = Field(json_schema_extra=NEW, description="number of the new fact")
    duplicate_of: int = Field(-1, json_schema_extra=MATCH, description="number of the existing fact it repeats, or -1")
    contradicts: list[Annotated[int, Field(json_schema_extra=NEW)]] = Field(default_factory=list, json_schema_extra={"maxItems": 10},
                                   description="numbers of existing facts it makes no longer true")


class FactDecisions(BaseModel):
    """One decision per new fact."""

    decisions: list[FactDecision] = Field(default_factory=list, json_schema_extra={"maxItems": 16})


@lru_cache(maxsize=1024)
def decisions_schema(n_new: int, n_existing: int) -> type[FactDecisions]:
    """``FactDecisions`` whose decoding schema bounds every number by the lists a request shows: ``new`` by
    the ``n_new`` new facts, ``duplicate_of`` and ``contradicts`` by the ``n_existing`` existing facts, one
    decision per new fact, each contradicting at most every existing fact."""

    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = FactDecisions.model_json_schema(*args, **kwargs)
        item = schema["$defs"]["FactDecision"]["properties"]
        item["new"] = {**item["new"], "minimum": 0, "maximum": max(0, n_new - 1)}
        item["duplicate_of"] = {**item["duplicate_of"], "minimum": -1, "maximum": n_existing - 1}
        old = item["contradicts"]
        item["contradicts"] = {**old, "maxItems": max(0, n_existing),
                               "items": {**old["items"], "minimum": 0, "maximum": max(0, n_existing - 1)}}
        schema["properties"]["decisions"]["maxItems"] = max(1, n_new)
        return schema

    return type(f"FactDecisions{n_new}_{n_existing}", (FactDecisions,),
                {"model_json_schema": classmethod(model_json_schema), "__module__": __name__})


def render_dedup_facts(
    time: str, new_facts: Sequence[str], existing: Sequence[str]
) -> list[dict[str, str]]:
    """Messages comparing ``new_facts`` (stated at ``time``) with ``existing`` facts (already rendered
    with their validity period)."""
    old = "\n".join(f"{i}. {f}" for i, f in enumerate(existing))
    new = "\n".join(f"{i}. {f}" for i, f in enumerate(new_facts))
    body = (
        f"Existing facts:\n{old}\nNew facts (stated {time}):\n{new}\n"
        "Task: for each new fact give duplicate_of (existing number or -1) and contradicts "
        "(existing numbers)."
    )
    return [system(DEDUP_SYSTEM), user(body)]


DEDUP_FACTS = Prompt("dedup_facts", "v1", render_dedup_facts, FactDecisions)
