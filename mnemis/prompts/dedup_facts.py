"""Fact dedup and contradiction (REFERENCE §2.2 step 10): new facts of one episode against the
existing facts that share their entities or are semantically close (one request per episode)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, Field

from mnemis.prompts.resolve_entities import MATCH, NEW

from mnemis.prompts.base import Prompt, system, user

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
