"""Category extraction for one layer of the hierarchy (the paper, our own wording).

The model sees an indexed list of nodes of layer ``i-1`` (``k. name [tag, tag]``) and the categories
already made at layer ``i`` (by name, or described as ``- name [tag, tag]: e.g. member, member``), and
answers with assignments ``{"category": name, "indexes": [k, ...]}``; nodes are referred to by index only.
Constraints (coverage, minimum children, no "and" names) are enforced again in code by
``mnemis.hierarchy.constraints``; the prompt only asks for them. The paper's ``prev_example`` (a
sample of the layer below) is not sent: from layer 2 on, the listed nodes *are* that layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, bare_list_as, system, user


class NodeView(NamedTuple):
    """What the model sees of one node: its name and its tags (for an existing category, optionally a
    few of its members so far, which with the tags describe it)."""

    name: str
    tags: Sequence[str] = ()
    members: Sequence[str] = ()


class Assignment(BaseModel):
    category: str = Field(
        description="name of one category: a single concept of 1-4 words, no 'and' or '&'",
        json_schema_extra={"maxLength": 60},  # bounds decoding only; longer names are cut in code
    )
    indexes: list[int] = Field(description="the numbers of the listed nodes that belong to this category")


class Categorization(BaseModel):
    assignments: list[Assignment] = Field(
        description="every listed node must appear in at least one assignment; a node may appear in several"
    )

    _accept_bare_list = bare_list_as("assignments")


@lru_cache(maxsize=256)
def bounded_categorization(n_nodes: int, min_assignments: int = 0, min_members: int = 1) -> type[Categorization]:
    """``Categorization`` whose JSON Schema (used for constrained decoding) bounds every index to
    ``1..n_nodes`` and every list to ``n_nodes`` items, so a small model cannot count on forever.

    ``min_assignments > 0`` also makes decoding produce at least that many categories (at most ``n_nodes``),
    each of at least ``min_members`` nodes (at most ``n_nodes``): a model that would reply with no category
    at all (which nothing stops in the paper's unconstrained decoding) must group something. Validation stays as lax as
    ``Categorization``: a backend without constrained decoding can still return out-of-range indexes or too
    few categories, which the caller repairs and counts instead of losing the reply.
    """
    least = min(min_assignments, n_nodes)
    members = min(max(min_members, 1), n_nodes)

    class BoundedCategorization(Categorization):
        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            schema = Categorization.model_json_schema(*args, **kwargs)
            schema["title"] = f"Categorization{n_nodes}" + (f"_min{least}x{members}" if least else "")
            schema["properties"]["assignments"]["maxItems"] = n_nodes
            indexes = schema["$defs"]["Assignment"]["properties"]["indexes"]
            indexes["maxItems"] = n_nodes
            indexes["items"] = {**indexes["items"], "minimum": 1, "maximum": n_nodes}
            if least:
                schema["properties"]["assignments"]["minItems"] = least
                indexes["minItems"] = members
            return schema

    name = f"Categorization{n_nodes}" + (f"Min{least}x{members}" if least else "")
    BoundedCategorization.__name__ = BoundedCategorization.__qualname__ = name
    return BoundedCategorization


_SYSTEM = """You organise the nodes of a personal memory graph into categories, building one layer of \
abstraction at a time.

Input: a numbered list of nodes. Each line reads `k. name [tag, tag, ...]`; the tags are short \
descriptors of the node. Judge a node by the meaning of its name first and its tags second.

Follow these principles:
1. Smallest step up. Name each category after the most specific idea its members really share. Keep it \
informative; broader groupings are made later, at the layers above.
2. Several facets, several categories. A node may join more than one category when it has more than one \
distinct facet (a violin is both a "Musical Instrument" and a "String Object"). Form each category on the \
fewest features its members have in common.
3. Compress. Every category should gather at least {min_children} nodes. Only a node that fits nowhere \
may stand alone in a category of its own.
4. Leave nothing out. Every listed number must appear in at least one category.
5. One concept per name. A category name has 1-4 words and never joins two ideas with "and" or "&": \
instead of "Food and Drink" make two categories, "Food" and "Drink", or use one word that covers both, \
such as "Nutrition".
6. Reuse. When a node fits one of the existing categories, use that category's exact name.
7. Refer to nodes only by their numbers; never copy node names into the answer.

Answer with JSON only, in this shape:
{{"assignments": [{{"category": "<name>", "indexes": [<number>, ...]}}, ...]}}"""

_EXAMPLE = """Example (layer 1):
1. Guitar lessons [music, weekly class]
2. Piano [instrument, keys]
3. City marathon [running, race]
4. Morning yoga [exercise, stretching]
5. Violin [instrument, strings]
Answer: {"assignments": [{"category": "Musical Instruments", "indexes": [2, 5]}, \
{"category": "Music", "indexes": [1, 2, 5]}, {"category": "Exercise", "indexes": [3, 4]}]}"""


def _layer_guidance(layer: int, speaker: str | None) -> str:
    if layer <= 1:
        text = (
            "Layer 1: the nodes are entities (people, places, objects, activities, events, ideas). "
            "Make fine-grained categories that keep what the members concretely share."
        )
        if speaker:
            text += (
                f' Nodes that stand for the user or the person speaking ("I", "me", "the user") go into the '
                f'existing category "{speaker}"; do not create another category for them.'
            )
        return text
    return (
        f"Layer {layer}: the nodes are the categories of layer {layer - 1}. Merge closely related ones into "
        "concepts one step broader. Do not force loosely related categories together; a node that belongs "
        "to two broader concepts may join both."
    )


def _line(k: int, node: NodeView) -> str:
    tags = ", ".join(t for t in node.tags if t)
    return f"{k}. {node.name} [{tags}]"


def _existing_line(c: NodeView) -> str:
    line = f"- {c.name} [{', '.join(c.tags)}]" if c.tags else f"- {c.name}"
    return line + (f": e.g. {', '.join(c.members)}" if c.members else "")


def categorize_v2(
    nodes: Sequence[NodeView],
    layer: int,
    *,
    existing: Sequence[NodeView] = (),
    min_children: int = 2,
    speaker: str | None = None,
    reask: bool = False,
) -> list[dict[str, str]]:
    """Messages asking to assign ``nodes`` (numbered from 1) to categories of ``layer``.

    ``existing``: categories already made at this layer (name, tags and, when given, some members) to be
    reused; ``reask``: the
    nodes were left out of an earlier answer and must now be placed.
    """
    parts: list[str] = []
    if reask:
        parts.append("These nodes were left without a category. Place every one of them.")
    parts.append("Nodes:\n" + "\n".join(_line(k, n) for k, n in enumerate(nodes, start=1)))
    if existing:
        parts.append(
            "Existing categories at this layer (reuse the exact name when a node fits):\n"
            + "\n".join(_existing_line(c) for c in existing)
        )
    parts.append(_layer_guidance(layer, speaker))
    parts.append(
        f"Every number from 1 to {len(nodes)} must appear at least once. "
        'Category names must not contain "and" or "&". Answer with the JSON object only.'
    )
    return [
        system(_SYSTEM.format(min_children=min_children) + "\n\n" + _EXAMPLE),
        user("\n\n".join(parts)),
    ]


CATEGORIZE = Prompt("categorize", "v2", categorize_v2, Categorization)
