"""Pure functions that enforce the hierarchy's constraints on the model's answers (the paper).

Nothing here calls a model or touches the store. The build loop (``build.py``) feeds the parsed
answers through these functions in this order, per layer and group:

1. ``parse_assignments``: repair one reply (clean names, reject joined "A and B" names, drop
   out-of-range and duplicate indexes) and count every repair in ``Repairs``;
2. ``merge_assignments``: merge by normalised name into the layer's ``Draft`` categories (so the same
   name from two batches is one category; a node may sit in several categories);
3. ``dissolve_small``: categories with fewer than ``n`` children are dissolved; their children that
   have no other parent become unassigned (re-asked once, then promoted);
4. ``promote``: every node still unassigned becomes a single-child category of the next layer with its
   own name, flagged ``promoted=True``. Choice (the paper leaves it open): a promoted node is a
   real category node, so every layer is strict (parents of layer ``i`` only point to layer ``i-1``)
   and System-2 can walk layer by layer. If the name is already taken at that layer, the node joins
   that category instead (same name, same concept) and this is counted as ``reattached``;
5. ``layer_shrinks``: from layer 2 on, a layer that is not smaller than the one below is discarded
   and construction stops.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mnemis.prompts.categorize import Assignment
from mnemis.types import normalize_name

_JOINED = re.compile(r"(?:\band\b|&)", re.IGNORECASE)
_STRIP = " \t\r\n\"'`*#-_:;,.()[]{}<>|"
_LEADING_NUMBER = re.compile(r"^\s*\d+[.)]\s+")


@dataclass
class Repairs:
    """Counts of what had to be repaired or skipped in the model's answers (JSON-serialisable)."""

    out_of_range: int = 0
    duplicate_indexes: int = 0
    empty_names: int = 0
    empty_assignments: int = 0
    empty_replies: int = 0
    reattached: int = 0
    unknown_categories: int = 0
    rejected_names: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {
            "out_of_range": self.out_of_range,
            "duplicate_indexes": self.duplicate_indexes,
            "empty_names": self.empty_names,
            "empty_assignments": self.empty_assignments,
            "empty_replies": self.empty_replies,
            "reattached": self.reattached,
            "unknown_categories": self.unknown_categories,
            "rejected_names": len(self.rejected_names),
        }


@dataclass
class Draft:
    """A category of the layer under construction.

    ``rule``: made by a rule (the Speaker category), exempt from the minimum-children constraint.
    ``promoted``: a lower node carried up unchanged (one child, same name).
    """

    name: str
    children: list[str] = field(default_factory=list)
    rule: bool = False
    promoted: bool = False

    def add(self, child_ids: Iterable[str]) -> None:
        seen = set(self.children)
        for c in child_ids:
            if c not in seen:
                self.children.append(c)
                seen.add(c)


def clean_name(name: str, max_words: int = 6) -> str:
    """A category name tidied up: no list numbering, quotes or stray punctuation, single spaces.

    Returns "" when nothing usable is left (the caller counts it as an empty name). Names longer
    than ``max_words`` words are cut to their first ``max_words`` words.
    """
    if not isinstance(name, str):
        return ""
    text = _LEADING_NUMBER.sub("", name)
    text = " ".join(text.split()).strip(_STRIP)
    words = text.split()
    if len(words) > max_words:
        text = " ".join(words[:max_words]).strip(_STRIP)
    return text if any(ch.isalnum() for ch in text) else ""


def is_joined_name(name: str) -> bool:
    """True when the name joins two concepts with "and" or "&" ("Food and Drink", "R&D")."""
    return bool(_JOINED.search(name))


def clean_tags(tags: Sequence[str], max_tags: int = 5, max_words: int = 3) -> list[str]:
    """At most ``max_tags`` distinct tags of at most ``max_words`` words each (longer tags are cut)."""
    out: list[str] = []
    seen: set[str] = set()
    for tag in tags:
        if not isinstance(tag, str):
            continue
        words = " ".join(tag.split()).strip(_STRIP).split()
        text = " ".join(words[:max_words]).strip(_STRIP)
        key = normalize_name(text)
        if text and key not in seen:
            out.append(text)
            seen.add(key)
        if len(out) == max_tags:
            break
    return out


def parse_assignments(
    assignments: Sequence[Assignment],
    n_nodes: int,
    repairs: Repairs,
    *,
    max_name_words: int = 6,
) -> list[tuple[str, list[int]]]:
    """Repaired ``(name, 0-based indexes)`` pairs from one reply about ``n_nodes`` nodes numbered 1..n.

    Empty names, joined names ("A and B"), out-of-range and duplicate indexes are dropped and counted;
    an assignment left with no index is skipped (``empty_assignments``); a reply that places no node
    at all counts as ``empty_replies``. The skipped nodes stay unassigned for the caller to re-ask.
    """
    out: list[tuple[str, list[int]]] = []
    for item in assignments:
        name = clean_name(item.category, max_name_words)
        if not name:
            repairs.empty_names += 1
            continue
        if is_joined_name(name):
            repairs.rejected_names.append(name)
            continue
        seen: set[int] = set()
        idx: list[int] = []
        for k in item.indexes:
            if not 1 <= k <= n_nodes:
                repairs.out_of_range += 1
            elif k - 1 in seen:
                repairs.duplicate_indexes += 1
            else:
                seen.add(k - 1)
                idx.append(k - 1)
        if not idx:
            repairs.empty_assignments += 1
            continue
        out.append((name, idx))
    if not out:
        repairs.empty_replies += 1
    return out


def merge_assignments(
    drafts: dict[str, Draft], parsed: Sequence[tuple[str, Sequence[int]]], node_ids: Sequence[str]
) -> None:
    """Add the parsed assignments of one batch (``node_ids`` in prompt order) to ``drafts``, keyed by
    normalised name; the first spelling of a name is kept."""
    for name, idx in parsed:
        key = normalize_name(name)
        draft = drafts.get(key)
        if draft is None:
            draft = drafts[key] = Draft(name)
        draft.add(node_ids[i] for i in idx)


def assigned_ids(drafts: dict[str, Draft]) -> set[str]:
    return {c for d in drafts.values() for c in d.children}


def unassigned(node_ids: Sequence[str], drafts: dict[str, Draft]) -> list[str]:
    """The nodes (in input order) that belong to no draft category."""
    done = assigned_ids(drafts)
    return [n for n in node_ids if n not in done]


def dissolve_small(drafts: dict[str, Draft], min_children: int, keep_single: bool = False) -> list[str]:
    """Remove every non-rule, non-promoted draft with fewer than ``min_children`` children.

    Returns the dissolved names. Children that had another parent simply keep it; the others become
    unassigned (see ``unassigned``).
    """
    gone = [k for k, d in drafts.items() if not d.rule and not d.promoted and len(d.children) < min_children
            and not (keep_single and len(d.children) == 1)]  # keep_single: a named one-member category stays
    names = [drafts[k].name for k in gone]
    for k in gone:
        del drafts[k]
    return names


def promote(drafts: dict[str, Draft], orphans: Sequence[tuple[str, str]], repairs: Repairs) -> int:
    """Carry each ``(node_id, name)`` orphan up as a single-child category with its own name.

    If a category of that name already exists at the layer, the node joins it instead
    (``repairs.reattached``; two lower nodes of the same name share one promoted category).
    Returns the number of promoted categories created.
    """
    created = 0
    for node_id, name in orphans:
        key = normalize_name(name)
        draft = drafts.get(key)
        if draft is None:
            drafts[key] = Draft(name, [node_id], promoted=True)
            created += 1
            continue
        draft.add([node_id])
        repairs.reattached += 1
    return created


def layer_shrinks(layer: int, new_size: int, lower_size: int, rule: str = "shrink") -> bool:
    """The node-count rule from layer 2 on: ``shrink`` (ours) a new layer must be smaller than the one below;
    ``no_growth`` (the paper: "no more nodes than the layer beneath") it may be as large, not larger."""
    if rule not in ("shrink", "no_growth"):
        raise ValueError(f"layer rule must be 'shrink' or 'no_growth', got {rule!r}")
    return layer < 2 or new_size < lower_size or (rule == "no_growth" and new_size == lower_size)


def balanced_chunks(items: Sequence[str], size: int) -> list[list[str]]:
    """``items`` split into the fewest chunks of at most ``size``, with sizes differing by at most one."""
    if not items:
        return []
    n = -(-len(items) // max(1, size))
    base, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + base + (1 if i < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out
