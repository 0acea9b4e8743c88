"""Mem0 baseline: the memory update decision for one candidate fact (Mem0 paper §2.1, "update phase").

The LLM sees the candidate fact and the most similar stored memories, numbered from 0, and picks one
operation: ADD (a new memory), UPDATE (rewrite memory ``id`` so it also holds the new information),
DELETE (memory ``id`` is contradicted by the fact) or NOOP (already known or not worth keeping).
The paper uses a function-calling interface; we use a structured reply with the same fields.
The ``maxLength`` bound on ``text`` steers constrained decoding only; the update stage trims a longer
text and counts it, it never rejects the reply.

All three fields are listed as required in the JSON Schema, so a constrained decoder always writes ``id``:
Qwen2.5-Coder-1.5B, free to leave it out, answered UPDATE without an id on every fact of a LoCoMo session
(each one then a ``bad_id`` NOOP). Parsing still takes a reply without ``id`` or ``text`` (the defaults).

``operation`` is validated leniently (any string) so an unknown value is counted and treated as NOOP
by the caller rather than failing the item; the JSON Schema still lists the four values, so backends
with constrained decoding can only produce those.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from mnemis.prompts.base import Prompt, system, user

OPERATIONS = ("ADD", "UPDATE", "DELETE", "NOOP")
MAX_MEMORY_CHARS = 600

UPDATE_SYSTEM = (
    "You keep a memory store consistent. Compare a NEW FACT with the existing memories and choose one "
    "operation:\n"
    "- ADD: the fact is new information; text = the fact.\n"
    "- UPDATE: the fact adds detail to, or changes, the memory with number id; text = the rewritten memory "
    "holding both the old and the new information.\n"
    "- DELETE: the fact shows the memory with number id is no longer true; text = empty.\n"
    "- NOOP: the fact is already stored or not worth keeping; id = -1, text = empty.\n"
    "Always give id: the number in front of the memory for UPDATE and DELETE, -1 for ADD and NOOP. "
    "Reply with JSON only."
)


class MemoryOperation(BaseModel):
    """One update decision."""

    model_config = ConfigDict(json_schema_extra={"required": ["operation", "id", "text"]})  # decoding only

    operation: str = Field(json_schema_extra={"enum": list(OPERATIONS)},
                           description="ADD, UPDATE, DELETE or NOOP")
    id: int = Field(-1, json_schema_extra={"minimum": -1, "maximum": 99},  # decoding bound only
                    description="number of the existing memory for UPDATE/DELETE, else -1")
    text: str = Field("", json_schema_extra={"maxLength": MAX_MEMORY_CHARS},
                      description="memory text for ADD/UPDATE, else empty")


def render_mem0_update(fact: str, time: str, memories: Sequence[str]) -> list[dict[str, str]]:
    """Messages asking what to do with ``fact`` (stated at ``time``) given the similar ``memories``."""
    shown = "\n".join(f"{i}. {m}" for i, m in enumerate(memories)) if memories else "(no memories yet)"
    body = f"Existing memories:\n{shown}\n\nNEW FACT (stated {time}):\n{fact.strip()}\n\nTask: choose the operation."
    return [system(UPDATE_SYSTEM), user(body)]


MEM0_UPDATE = Prompt("mem0_update", "v3", render_mem0_update, MemoryOperation)
