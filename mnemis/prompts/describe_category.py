"""Tags and summary of one category, written from its children (the paper; the paper's prompt is
not released, so this one is entirely ours).

Tags: at most 5 descriptors of at most 3 words each (the same shape as entity tags). Summary: a few
sentences on what the children have in common and the notable facts they carry. Length limits are
enforced again in code (``mnemis.hierarchy.constraints.clean_tags``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user


class ChildView(NamedTuple):
    """What the model sees of one child: name, tags and (possibly truncated) summary."""

    name: str
    tags: Sequence[str] = ()
    summary: str = ""


# The ``json_schema_extra`` bounds only constrain decoding (a small model cannot ramble on); validation
# stays lax and ``clean_tags`` trims what a backend without constrained decoding sends.
class CategoryDescription(BaseModel):
    tags: list[str] = Field(
        description="at most 5 short descriptors of the category, each at most 3 words",
        json_schema_extra={"maxItems": 5, "items": {"type": "string", "maxLength": 40}},
    )
    summary: str = Field(
        description="2-4 sentences: what the members share and the notable facts they hold",
        json_schema_extra={"maxLength": 800},
    )


_SYSTEM = """You describe one category of a personal memory graph from the members it groups.

Write:
- "tags": up to 5 short descriptors of the category, each at most 3 words (for a category "Family \
Members": ["relatives", "household", "kinship"]).
- "summary": 2-4 sentences on what the members have in common and the most useful specific facts \
they carry (names, places, dates). Use only what the members say; do not invent.

Answer with JSON only: {"tags": ["..."], "summary": "..."}"""


def _child_line(child: ChildView, max_summary_chars: int) -> str:
    line = f"- {child.name}"
    if child.tags:
        line += f" [{', '.join(child.tags)}]"
    summary = " ".join(child.summary.split())
    if summary:
        if len(summary) > max_summary_chars:
            summary = summary[: max_summary_chars - 3].rstrip() + "..."
        line += f": {summary}"
    return line


def describe_category_v1(
    name: str,
    layer: int,
    children: Sequence[ChildView],
    *,
    omitted: int = 0,
    max_summary_chars: int = 200,
) -> list[dict[str, str]]:
    """Messages asking for tags and a summary of category ``name`` at ``layer`` from ``children``.

    ``omitted``: how many further members were left out of the list to keep the prompt short.
    """
    lines = "\n".join(_child_line(c, max_summary_chars) for c in children)
    more = f"\n(and {omitted} more members)" if omitted > 0 else ""
    text = (
        f'Category: "{name}" (layer {layer} of the hierarchy)\nMembers:\n{lines}{more}\n\n'
        "Answer with the JSON object only."
    )
    return [system(_SYSTEM), user(text)]


DESCRIBE_CATEGORY = Prompt("describe_category", "v1", describe_category_v1, CategoryDescription)
