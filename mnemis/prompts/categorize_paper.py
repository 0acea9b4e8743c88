"""Category extraction with the scaffolding of the paper's prompt (``hierarchy.prompt=paper``; our own words).

The paper's categorisation prompt (Mnemis, Appendix D) carries more than our default one
(:mod:`mnemis.prompts.categorize`): worked examples for layers 1 to 4, guidance on how abstract each layer
is, a definition of tags, and an example of how the previous layer was grouped. This module gives the model
the same scaffolding, written anew, with the same input lines (``k. name [tags]``), the same existing-category
lines and the same reply schema (``Categorization``: assignments of node numbers to category names), so the
build code, its constraints and its repairs do not change with the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.categorize import Categorization, NodeView

_SYSTEM = """You sort the nodes of a personal memory graph into categories. The graph is built from the \
most specific level to the most abstract one, one layer at a time, and you are building one layer now.

# What you are given
A numbered list of nodes. Each line reads `k. name [tag, tag, ...]`. A node's tags are a short list (at most \
five) of descriptors of at most three words each that say what kind of thing the node is or what role it \
plays; for example, a person's sister might carry the tags [Family member, Nurse, Marathon runner]. Decide \
on the meaning of the name and the tags together; never on the tags alone.

# How to group
1. Put nodes that share a real attribute (what they are, what they are used for, where or when they \
belong) into one category, named after that shared attribute.
2. A node may go into several categories when it has several distinct facets. For each category use the \
smallest set of features its members truly have in common.
3. The categories already made at this layer are listed with a short description. When a node fits one, \
put it there under its exact name; only create a new category when none fits.
4. A category name names one idea. It never joins two ideas with "and" (not "Books and Films" but \
"Books" and "Films" as two categories).
5. Every listed node must end up in at least one category. A category with a single member is allowed \
only when the node really fits nowhere else.
6. The node that stands for the user or the speaker ("user", "I", "me") goes into the category \
"Speaker" when that category exists; never make another one for it.

# How abstract each layer is (an example chain of our own)
Layer 1, the most specific groups of concrete things:
- "Tennis racket", "Badminton racket" -> "Racket sports gear"
- "Morning jog", "Trail run", "City 10K" -> "Running"
- "Spinach salad", "Lentil soup" -> "Healthy meals"
Layer 2, groups of layer-1 categories:
- "Racket sports gear", "Running shoes" -> "Sports equipment"
- "Running", "Swimming" -> "Endurance training"
- "Healthy meals", "Vitamin supplements" -> "Nutrition"
Layer 3, broader domains:
- "Sports equipment", "Endurance training" -> "Physical activity"
- "Nutrition", "Sleep habits" -> "Daily routines"
Layer 4, top-level concepts:
- "Physical activity", "Daily routines" -> "Wellbeing"
A category of one layer may sit under several categories of the next one ("Endurance training" can \
belong to both "Physical activity" and "Competitions"). Never merge categories that are only loosely \
related.

# Reply
JSON only: {"assignments": [{"category": "<name>", "indexes": [<node number>, ...]}, ...]}. Refer to \
nodes by their numbers only; never copy their names into the reply."""


def _line(k: int, node: NodeView) -> str:
    tags = ", ".join(t for t in node.tags if t)
    return f"{k}. {node.name} [{tags}]"


def _existing_line(c: NodeView) -> str:
    line = f"- {c.name} [{', '.join(c.tags)}]" if c.tags else f"- {c.name}"
    return line + (f": e.g. {', '.join(c.members)}" if c.members else "")


def _guidance(layer: int, previous: Sequence[NodeView]) -> str:
    if layer <= 1:
        text = ("You are building layer 1: the nodes are entities (people, places, objects, activities, events, "
                "ideas). Make the most specific categories that still group several of them.")
    else:
        text = (f"You are building layer {layer}: the nodes are the categories of layer {layer - 1}. Group them "
                f"into concepts one step more abstract than layer {layer - 1}, following the example chain.")
    if previous:
        lines = "\n".join(f"- {', '.join(f'{m!r}' for m in p.members)} -> {p.name!r}" for p in previous)
        text += f"\nHow some of the layer-{layer - 1} categories were formed:\n{lines}"
    return text


def categorize_paper(
    nodes: Sequence[NodeView],
    layer: int,
    *,
    existing: Sequence[NodeView] = (),
    min_children: int = 2,
    speaker: str | None = None,
    reask: bool = False,
    previous: Sequence[NodeView] = (),
) -> list[dict[str, str]]:
    """Messages asking to assign ``nodes`` (numbered from 1) to categories of ``layer``.

    ``existing``: this layer's categories so far (name, tags, a few members); ``previous``: a few categories
    of the layer below with their members (the example of how that layer was grouped); ``speaker``: the
    rule-made speaker category's name, when it exists at this layer; ``reask``: the nodes were left out of
    an earlier answer and must now be placed. ``min_children`` is enforced in code (the paper's prompt
    names no number; it asks for categories of several members).
    """
    parts: list[str] = []
    if reask:
        parts.append("These nodes were left without a category. Place every one of them.")
    parts.append("# Nodes\n" + "\n".join(_line(k, n) for k, n in enumerate(nodes, start=1)))
    parts.append("# Existing categories at this layer (reuse them when a node fits)\n"
                 + ("\n".join(_existing_line(c) for c in existing) if existing else "(none yet)"))
    parts.append("# This layer\n" + _guidance(layer, previous))
    rules = [f"Every number from 1 to {len(nodes)} must appear at least once.",
             'No category name contains "and".']
    if speaker:
        rules.append(f'Nodes that stand for the user or the speaker go into "{speaker}".')
    parts.append("# Check before you answer\n" + " ".join(rules))
    return [system(_SYSTEM), user("\n\n".join(parts))]


CATEGORIZE_PAPER = Prompt("categorize", "paper-v1", categorize_paper, Categorization)
