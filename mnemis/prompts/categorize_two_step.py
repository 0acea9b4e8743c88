"""Category induction in two steps, for models too small to group a numbered list in one reply (our own design).

1. **Propose** (``hierarchy.propose``): the model sees one batch of nodes (``k. name [tag, tag]``) and names
   about ``k`` categories that could hold them. Reply ``{"categories": ["name", ...]}``; the decoding schema bounds
   the count and each name's length.
2. **Assign** (``hierarchy.assign``): the model sees the same nodes and the proposed names and puts every node in
   one or more of them. Reply ``{"placements": {"1. Guitar": ["Music"], "2. Piano": [...], ...}}``. The decoding
   schema has one **required** key per listed node (its number and the start of its name, in list order) whose value is a list of
   1..``max_parents`` names drawn from an ``enum`` of the proposed names: a constrained model can neither skip a
   node nor invent a category, and it writes each node's key before choosing for it.

Validation stays lax (a backend without constrained decoding may return unknown keys or names); the caller maps
keys back by their leading number and counts what it had to drop.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.categorize import NodeView

NAME_CHARS = 40  # longest category name decoding may write (names are cut to max_name_words in code)
KEY_NAME_CHARS = 12  # node names in the assignment keys are cut to this many characters (at a word boundary when
# one lies in the second half): a cue for the model; every key token is a decoding step on a slow CPU
_KEY_UNSAFE = re.compile(r'["\\\x00-\x1f]')


class CategoryProposal(BaseModel):
    categories: list[str] = Field(description="category names, each a single concept of 1-4 words")


class Placement(BaseModel):
    placements: dict[str, list[str]] = Field(
        description="for every listed node (key: its number and name) the categories it belongs to")


@lru_cache(maxsize=256)
def proposal_schema(least: int, most: int) -> type[CategoryProposal]:
    """``CategoryProposal`` whose decoding schema asks for ``least``..``most`` names of at most
    :data:`NAME_CHARS` characters each."""
    least, most = max(1, least), max(1, least, most)

    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = CategoryProposal.model_json_schema(*args, **kwargs)
        schema["title"] = f"CategoryProposal{least}_{most}"
        prop = schema["properties"]["categories"]
        prop["items"] = {"type": "string", "minLength": 1, "maxLength": NAME_CHARS}
        prop["minItems"], prop["maxItems"] = least, most
        return schema

    return type(f"CategoryProposal{least}_{most}", (CategoryProposal,),
                {"model_json_schema": classmethod(model_json_schema), "__module__": __name__})


def node_key(k: int, name: str) -> str:
    """The assignment key of node ``k`` (1-based): ``"k. name"``, the name shortened and stripped of quotes,
    backslashes and control characters (the number alone identifies the node)."""
    text = " ".join(_KEY_UNSAFE.sub(" ", name or "").split())
    if len(text) > KEY_NAME_CHARS:
        head = text[: KEY_NAME_CHARS + 1]
        cut = head.rsplit(" ", 1)[0] if " " in head else ""
        text = cut if len(cut) > KEY_NAME_CHARS // 2 else text[:KEY_NAME_CHARS]
    return f"{k}. {text.rstrip()}" if text else str(k)


def key_index(key: str, n_nodes: int) -> int | None:
    """0-based node index of an assignment key (its leading number), or None when it names no listed node."""
    m = re.match(r"\s*(\d+)", key or "")
    if m is None:
        return None
    k = int(m.group(1))
    return k - 1 if 1 <= k <= n_nodes else None


@lru_cache(maxsize=256)
def placement_schema(keys: tuple[str, ...], names: tuple[str, ...], max_parents: int) -> type[Placement]:
    """``Placement`` whose decoding schema requires every key of ``keys`` (in order), each with 1..``max_parents``
    names from ``names``; no other key is allowed."""
    if not keys or not names:
        raise ValueError("an assignment needs at least one node and one category")
    most = max(1, min(max_parents, len(names)))

    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        item = {"type": "array", "items": {"enum": list(names)}, "minItems": 1, "maxItems": most}
        return {
            "title": f"Placement{len(keys)}x{len(names)}",
            "type": "object",
            "properties": {"placements": {"type": "object", "properties": {k: dict(item) for k in keys},
                                          "required": list(keys), "additionalProperties": False}},
            "required": ["placements"],
        }

    return type(f"Placement{len(keys)}x{len(names)}_{most}", (Placement,),
                {"model_json_schema": classmethod(model_json_schema), "__module__": __name__})


def proposal_count(n_nodes: int, per_category: int, min_children: int) -> tuple[int, int]:
    """How many names to ask for over ``n_nodes`` nodes: about one per ``per_category`` nodes, never more than
    could each hold ``min_children`` of them, at least 2. Returns (least, most)."""
    most = max(2, min(math.ceil(n_nodes / max(1, per_category)), n_nodes // max(1, min_children)))
    return max(2, most // 2), most


# ------------------------------------------------------------------------------------------------ prompts
_PROPOSE_SYSTEM = """You help organise a personal memory graph. You will see a numbered list of nodes \
(`k. name [tag, tag, ...]`) from one layer of the graph. Suggest names for the categories that these nodes \
could be grouped into, one layer of abstraction higher.

Good category names:
- each name a single concept of 1-4 words, never two ideas joined with "and" or "&";
- about what the nodes are about, not about what kind of thing they are: a name like "Things", "People", "Places", "Objects", "Events" or "Ideas" says nothing and is not allowed;
- specific, yet shared by several listed nodes;
- different from each other: no two names for the same idea.

Answer with JSON only: {"categories": ["<name>", ...]}"""


def _line(k: int, node: NodeView) -> str:
    tags = ", ".join(t for t in node.tags if t)
    return f"{k}. {node.name} [{tags}]"


def _layer_note(layer: int) -> str:
    if layer <= 1:
        return ("The nodes are entities mentioned in one person's conversations. Name the topics of their life "
                "that several nodes share (a hobby, a trip, a job, a family matter, a plan).")
    return (f"The nodes are categories of layer {layer - 1}. Name broader themes, each covering several of them.")


def render_propose(nodes: Sequence[NodeView], layer: int, *, least: int, most: int) -> list[dict[str, str]]:
    """Messages asking for ``least``..``most`` category names for ``nodes`` at ``layer``."""
    listing = "\n".join(_line(k, n) for k, n in enumerate(nodes, start=1))
    body = (f"Nodes:\n{listing}\n\n{_layer_note(layer)}\n\n"
            f"Suggest between {least} and {most} category names that together cover every node above. "
            "Answer with the JSON object only.")
    return [system(_PROPOSE_SYSTEM), user(body)]


_ASSIGN_SYSTEM = """You sort the nodes of a personal memory graph into categories. You will see a numbered list \
of nodes (`k. name [tag, tag, ...]`) and a list of allowed categories.

For EVERY node, in the order listed, give the categories it belongs to:
- use only names from the allowed list, spelled exactly as listed;
- choose the category that fits the node best; add a second one only when the node clearly has a second \
facet (a violin is both "Musical Instruments" and "String Objects");
- every node gets at least one category, even when the fit is loose.

Answer with JSON only: {"placements": {"1. <node name>": ["<category>"], "2. <node name>": ["<category>", \
"<category>"], ...}}"""


def render_assign(
    nodes: Sequence[NodeView], layer: int, categories: Sequence[str], *, reask: bool = False
) -> list[dict[str, str]]:
    """Messages asking to place every one of ``nodes`` into ``categories`` (``reask``: the nodes were left without
    a category by an earlier answer, or their categories were too small to keep)."""
    listing = "\n".join(_line(k, n) for k, n in enumerate(nodes, start=1))
    allowed = "\n".join(f"- {c}" for c in categories)
    head = "These nodes still need a category.\n\n" if reask else ""
    body = (f"{head}Nodes:\n{listing}\n\nAllowed categories (layer {layer}):\n{allowed}\n\n"
            f"Place every node from 1 to {len(nodes)}. Answer with the JSON object only.")
    return [system(_ASSIGN_SYSTEM), user(body)]


PROPOSE = Prompt("hierarchy.propose", "v2", render_propose, CategoryProposal)
ASSIGN = Prompt("hierarchy.assign", "v2", render_assign, Placement)
