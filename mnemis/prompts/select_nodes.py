"""System-2 node selection: pick the nodes of a memory hierarchy that may help answer a query.

Two forms of the same content, both in our own words (``retrieval.system2.prompt_form``):

``ours`` (the default): the instructions in a system message, then the candidate list, then the query.
The model sees one compact JSON object per line (``{"id": "n3", "name": "Health", "tags": [...]}``, the
summary only when configured) and answers ``{"selections": [{"id", "name", "take_all_children"}, ...]}``.
Prefix caching: at the top layer every query of a group sees the same candidates, so all of them share one
long prefix. Ids are short prompt-local labels (``n1``, ``n2`` ...) assigned in candidate order; the caller
maps them back to store ids (cheaper and less error-prone for small models than 20-character hashes).

``released`` (``mode=paper``): the form of the authors' released ``global_selector.py``: one user message,
the instructions, then the query, then one JSON line per node with its store id, name and tags
(``{"uuid": ..., "name": ..., "tag": [...]}``), nodes in store order; the reply is
``{"selections": [{"name", "uuid", "get_all_children"}, ...]}``. The decoding schema can still restrict the
ids to the ones shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, bare_list_as, system, user


class CandidateView(NamedTuple):
    """What the model sees of one candidate node."""

    id: str
    name: str
    tags: Sequence[str] = ()
    summary: str = ""


class NodeSelection(BaseModel):
    # maxLength bounds decoding only (reply budgets); the name is only a fallback for mapping back
    id: str = Field("", json_schema_extra={"maxLength": 16}, description="the id of a listed node, copied exactly")
    name: str = Field("", json_schema_extra={"maxLength": 100}, description="the name of that node")
    take_all_children: bool = Field(
        False, description="true only when you are confident every node below this one is useful"
    )


class NodeSelections(BaseModel):
    # required: a truncated reply whose only complete JSON value is one inner selection must not
    # validate as an empty selection
    selections: list[NodeSelection] = Field(
        description="every listed node that may help; empty when none does"
    )

    _accept_bare_list = bare_list_as("selections")


_SYSTEM = """You navigate a hierarchical memory graph built from a person's conversations. Higher \
nodes are broad categories; lower nodes are narrower categories and, at the bottom, concrete entities \
(people, places, objects, events).

You are shown a list of available nodes and a query. Select EVERY node that could help answer the \
query: a node that relates to it directly, covers a relevant topic, gives useful background, holds \
personal information about the user (interests, goals, health, relationships, plans), or probably \
contains useful nodes below it. Be generous: a partly redundant node is better than a missed one.

For each selected node give its id and name exactly as listed. Set "take_all_children" to true only \
when you are confident that ALL the nodes below it are useful; otherwise false. Select nothing when no \
node can help.

Answer with JSON only, in this shape:
{"selections": [{"id": "<id>", "name": "<name>", "take_all_children": false}, ...]}"""


@lru_cache(maxsize=512)
def selection_schema(n_candidates: int, min_items: int = 0) -> type[NodeSelections]:
    """``NodeSelections`` whose JSON Schema (used for constrained decoding only) restricts ``id`` to
    the prompt's ids ``n1..nK`` and the list to ``K`` items, so a small model can neither invent ids
    nor loop until ``max_tokens``; ``min_items`` > 0 also makes it pick at least that many (capped at K).
    Validation stays the lenient base one (name fallback, counting)."""
    ids = [f"n{j}" for j in range(1, n_candidates + 1)]

    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = NodeSelections.model_json_schema(*args, **kwargs)
        item = schema["$defs"]["NodeSelection"]
        id_schema = {k: v for k, v in item["properties"]["id"].items() if k != "default"}
        item["properties"]["id"] = {**id_schema, "enum": ids}
        item["required"] = ["id", "take_all_children"]
        schema["properties"]["selections"]["maxItems"] = n_candidates
        if min_items:
            schema["properties"]["selections"]["minItems"] = min(min_items, n_candidates)
        return schema

    return type(f"NodeSelections{n_candidates}_{min_items}", (NodeSelections,),
                {"model_json_schema": classmethod(model_json_schema), "__module__": __name__})


_OBJ = re.compile(r"\{[^{}\[\]]*\}")


def salvage_selections(text: str) -> list[NodeSelection]:
    """Complete selection objects of a reply cut off mid-way (e.g. at ``max_tokens``)."""
    out = []
    for m in _OBJ.finditer(text or ""):
        try:
            obj = json.loads(m.group(0))
            if isinstance(obj, dict) and "uuid" in obj:  # the released form's fields
                out.append(ReleasedSelection.model_validate(obj).as_selection())
            elif isinstance(obj, dict) and ("id" in obj or "name" in obj):
                out.append(NodeSelection.model_validate(obj))
        except Exception:  # noqa: BLE001 - a broken fragment is skipped
            continue
    return out


def candidate_line(c: CandidateView, *, use_summary: bool = False, use_tags: bool = True) -> str:
    """One compact JSON line for a candidate (``ensure_ascii=False``)."""
    obj: dict[str, Any] = {"id": c.id, "name": c.name}
    if use_tags and c.tags:
        obj["tags"] = list(c.tags)
    if use_summary and c.summary:
        obj["summary"] = c.summary
    return json.dumps(obj, ensure_ascii=False)


def render_select_nodes(
    query: str, candidates: Sequence[CandidateView], *, use_summary: bool = False, use_tags: bool = True
) -> list[dict[str, str]]:
    """Messages asking which of ``candidates`` help answer ``query`` (candidates before the query)."""
    lines = "\n".join(candidate_line(c, use_summary=use_summary, use_tags=use_tags) for c in candidates)
    body = f"Available nodes:\n{lines}\n\nQuery: \"{' '.join(query.split())}\"\n\nSelected nodes (JSON):"
    return [system(_SYSTEM), user(body)]


SELECT_NODES = Prompt("select", "v1", render_select_nodes, NodeSelections)

# ------------------------------------------------------------------------------------ the released form
PROMPT_FORMS = ("ours", "released")


class ReleasedSelection(BaseModel):
    name: str = Field("", json_schema_extra={"maxLength": 100}, description="the node's name")
    uuid: str = Field("", json_schema_extra={"maxLength": 64}, description="the node's identifier, as listed")
    get_all_children: bool = Field(False, description="true only when every node below this one helps")

    def as_selection(self) -> NodeSelection:
        return NodeSelection(id=self.uuid, name=self.name, take_all_children=self.get_all_children)


class ReleasedSelections(BaseModel):
    selections: list[ReleasedSelection] = Field(description="every listed node that may help; empty when none does")

    _accept_bare_list = bare_list_as("selections")

    def as_selections(self) -> NodeSelections:
        return NodeSelections(selections=[s.as_selection() for s in self.selections])


@lru_cache(maxsize=512)
def released_selection_schema(ids: tuple[str, ...], min_items: int = 0) -> type[ReleasedSelections]:
    """``ReleasedSelections`` whose decoding schema restricts ``uuid`` to the shown ``ids`` and the list to
    ``len(ids)`` items (``min_items`` > 0: at least that many picks); validation stays the lenient base one."""

    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = ReleasedSelections.model_json_schema(*args, **kwargs)
        item = schema["$defs"]["ReleasedSelection"]
        uuid = {k: v for k, v in item["properties"]["uuid"].items() if k != "default"}
        item["properties"]["uuid"] = {**uuid, "enum": list(ids)}
        item["required"] = ["name", "uuid", "get_all_children"]
        schema["properties"]["selections"]["maxItems"] = len(ids)
        if min_items:
            schema["properties"]["selections"]["minItems"] = min(min_items, len(ids))
        return schema

    return type(f"ReleasedSelections{len(ids)}_{min_items}", (ReleasedSelections,),
                {"model_json_schema": classmethod(model_json_schema), "__module__": __name__})


_RELEASED_INSTRUCTIONS = """You are reading a hierarchical knowledge graph built from a person's conversations, \
to help answer a user query.

Choose every node that could help answer the query. A node helps when it:
- relates directly to the query;
- covers a topic, concept or category that is clearly relevant;
- gives useful background or context;
- holds information about the user (interests, goals, constraints and the like);
- probably has nodes below it that help.

Lean towards choosing: keep a node that may add context or personal detail even when it partly repeats \
another one.

For each chosen node give:
- "name": the node's name;
- "uuid": the node's identifier, exactly as listed;
- "get_all_children": true only when you are sure that every node below it helps, else false."""


def released_line(c: CandidateView, *, use_summary: bool = False, use_tags: bool = True) -> str:
    """One JSON line per node, the released form's fields: ``uuid``, ``name``, ``tag`` (and ``summary``)."""
    obj: dict[str, Any] = {"uuid": c.id, "name": c.name}
    if use_tags:
        obj["tag"] = list(c.tags)
    if use_summary:
        obj["summary"] = c.summary
    return json.dumps(obj, ensure_ascii=False)


def render_select_nodes_released(
    query: str, candidates: Sequence[CandidateView], *, use_summary: bool = False, use_tags: bool = True
) -> list[dict[str, str]]:
    """One user message: the instructions, the query, then the nodes (``candidates`` carry store ids)."""
    lines = "\n".join(released_line(c, use_summary=use_summary, use_tags=use_tags) for c in candidates)
    body = (f"{_RELEASED_INSTRUCTIONS}\n---\nUser query:\n\"{' '.join(query.split())}\"\n\n"
            f"Available nodes:\n{lines}\n")
    return [user(body)]


SELECT_NODES_RELEASED = Prompt("select", "released-v1", render_select_nodes_released, ReleasedSelections)
