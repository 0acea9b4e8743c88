"""Mem0g baseline: the graph memory as the Mem0 paper describes it (arXiv 2504.19413, §2.2).

Three prompts per message pair, each over the same NEW MESSAGES block as the Mem0 extraction prompt
(every message with its own time):

- entities: the entities the new messages mention, each with a type (the node label);
- relations: directed triples ``(source, relation, destination)`` between those entities, with short
  timeless relation names (``lives_in``, not ``moved_to_last_year``) and nothing else (no fact
  sentence, no dates);
- conflicts: given the new triples and stored triples around the same entities, which stored ones the
  new information makes no longer true (they are then marked invalid, never removed).

The question's entities come from the entity prompt applied to the question. Length bounds steer
constrained decoding only; the graph stage trims and counts. Our own wording.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, bare_list_as, system, user
from mnemis.prompts.mem0_extract import message_line
from mnemis.types import Episode

MAX_ENTITIES = 12
MAX_RELATIONS = 12
MAX_NAME_CHARS = 60

GRAPH_SYSTEM = (
    "You maintain a knowledge graph memory of a conversation. Nodes are entities (people, pets, places, "
    "organisations, objects, events, activities); edges are directed relations between two entities. "
    "Use the most complete name the messages give; when a speaker says 'I' or 'me', use the speaker's "
    "name. Reply with JSON only."
)


class TypedEntity(BaseModel):
    name: str = Field(json_schema_extra={"maxLength": MAX_NAME_CHARS}, description="entity name, 1-5 words")
    type: str = Field("", json_schema_extra={"maxLength": 30},
                      description="entity type in one lower-case word or two, e.g. person, city, pet, hobby")


class GraphEntities(BaseModel):
    """Typed entities of the new messages (or of a question)."""

    entities: list[TypedEntity] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_ENTITIES})
    _accept_bare_list = bare_list_as("entities")


class Triple(BaseModel):
    source: str = Field(json_schema_extra={"maxLength": MAX_NAME_CHARS})
    relation: str = Field(json_schema_extra={"maxLength": 40},
                          description="short timeless relation name in snake_case, e.g. lives_in, works_as")
    destination: str = Field(json_schema_extra={"maxLength": MAX_NAME_CHARS})


class GraphRelations(BaseModel):
    """Relations stated in the new messages."""

    relations: list[Triple] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_RELATIONS})
    _accept_bare_list = bare_list_as("relations")


class ObsoleteRelations(BaseModel):
    """Stored relations the new ones make no longer true."""

    obsolete: list[int] = Field(default_factory=list, description="numbers of the stored relations that are no "
                                                                  "longer true; empty if none")
    _accept_bare_list = bare_list_as("obsolete")


def _messages(pair: Sequence[Episode]) -> str:
    return "NEW MESSAGES:\n" + "\n".join(message_line(e) for e in pair)


def _whose(speaker: str | None) -> str:
    return (f" You are writing the memory of {speaker}: use only what {speaker} says in {speaker}'s own "
            "messages; the other messages are context." if speaker else "")


def render_entities(pair: Sequence[Episode], speaker: str | None = None) -> list[dict[str, str]]:
    """Messages asking for the typed entities of ``pair``."""
    task = "Task: list the entities the NEW MESSAGES mention, each with its type." + _whose(speaker)
    return [system(GRAPH_SYSTEM), user(f"{_messages(pair)}\n\n{task}")]


def render_query_entities(question: str) -> list[dict[str, str]]:
    """Messages asking for the typed entities a question is about (not its answer)."""
    task = "Task: list the entities this question is about, each with its type. Do not answer the question."
    return [system(GRAPH_SYSTEM), user(f"QUESTION:\n{' '.join(question.split())}\n\n{task}")]


def render_relations(pair: Sequence[Episode], entities: Sequence[str], speaker: str | None = None
                     ) -> list[dict[str, str]]:
    """Messages asking for the relations between ``entities`` stated in ``pair``."""
    listed = "\n".join(f"- {e}" for e in entities) if entities else "(none)"
    task = ("Task: list the relations between these entities that the NEW MESSAGES state, as "
            "(source, relation, destination) with names from the list." + _whose(speaker))
    return [system(GRAPH_SYSTEM), user(f"{_messages(pair)}\n\nEntities:\n{listed}\n\n{task}")]


def render_conflicts(stored: Sequence[str], new: Sequence[str], time: str) -> list[dict[str, str]]:
    """Messages asking which ``stored`` relations the ``new`` ones (stated at ``time``) make obsolete."""
    old = "\n".join(f"{i}. {t}" for i, t in enumerate(stored))
    fresh = "\n".join(f"- {t}" for t in new)
    task = ("Task: list the numbers of the stored relations that the new relations show are no longer true "
            "(for example a place someone no longer lives in). A relation that is merely different or "
            "additional is not obsolete.")
    return [system(GRAPH_SYSTEM), user(f"Stored relations:\n{old}\n\nNew relations (stated {time}):\n{fresh}\n\n{task}")]


MEM0G_ENTITIES = Prompt("mem0g_entities", "v1", render_entities, GraphEntities)
MEM0G_QUERY_ENTITIES = Prompt("mem0g_query_entities", "v1", render_query_entities, GraphEntities)
MEM0G_RELATIONS = Prompt("mem0g_relations", "v1", render_relations, GraphRelations)
MEM0G_CONFLICTS = Prompt("mem0g_conflicts", "v1", render_conflicts, ObsoleteRelations)
