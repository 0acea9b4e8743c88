"""The model calls of a hierarchy layer: categorisation (in batches, sequential or parallel), the re-ask of
nodes left without a category, and the descriptions of new categories. Each step is one ``generate()`` holding
the requests of every group."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from mnemis.hierarchy.constraints import (
    Draft,
    balanced_chunks,
    clean_tags,
    merge_assignments,
    parse_assignments,
    unassigned,
)
from mnemis.hierarchy.state import Group, HierarchyConfig, LayerNode
from mnemis.models.llm.base import LLMRequest, LLMResult
from mnemis.prompts.categorize import CATEGORIZE, Categorization, NodeView, bounded_categorization
from mnemis.prompts.categorize_paper import CATEGORIZE_PAPER
from mnemis.prompts.describe_category import DESCRIBE_CATEGORY, CategoryDescription, ChildView
from mnemis.types import normalize_name

log = logging.getLogger(__name__)

STAGE_CATEGORIZE = "hierarchy.categorize"
STAGE_REASK = "hierarchy.reask"
STAGE_DESCRIBE = "hierarchy.describe"


# --------------------------------------------------------------------------- requests
def categorize_request(
    g: Group, layer: int, nodes: Sequence[LayerNode], cfg: HierarchyConfig, *, reask: bool
) -> LLMRequest:
    shown = sorted(g.drafts.values(), key=lambda d: -len(d.children))[: cfg.max_existing]
    speaker_key = normalize_name(cfg.speaker_category)
    speaker = cfg.speaker_category if layer == 1 and speaker_key in g.drafts else None
    extra = {"previous": _previous_example(g, layer, cfg.previous_examples)} if cfg.prompt == "paper" else {}
    messages = (CATEGORIZE_PAPER if cfg.prompt == "paper" else CATEGORIZE).render(
        [NodeView(n.name, n.tags) for n in nodes],
        layer,
        existing=[_existing_view(g, d, cfg) for d in shown],
        min_children=cfg.min_children,
        speaker=speaker,
        reask=reask,
        **extra,
    )
    return LLMRequest(
        messages=messages,
        schema=bounded_categorization(len(nodes), cfg.min_assignments, cfg.min_children),
        sampling=cfg.categorize_sampling,
        stage=STAGE_REASK if reask else STAGE_CATEGORIZE,
    )


def _previous_example(g: Group, layer: int, k: int) -> list[NodeView]:
    """The ``k`` largest categories of layer ``layer - 1`` that merged several children, with up to five
    child names each: how the layer below was grouped (none at layer 1)."""
    if layer < 2 or k == 0:
        return []
    names = {e.id: e.name for e in g.entities} | {c.id: c.name for c in g.categories}
    kids: dict[str, list[str]] = {}
    for e in g.edges:
        kids.setdefault(e.parent_id, []).append(e.child_id)
    below = [c for c in g.categories if c.layer == layer - 1 and len(kids.get(c.id, ())) >= 2]
    below.sort(key=lambda c: (-len(kids[c.id]), c.name))
    return [NodeView(c.name, (), [names[i] for i in kids[c.id][:5] if i in names]) for c in below[:k]]


def _existing_view(g: Group, d: Draft, cfg: HierarchyConfig) -> NodeView:
    """How a prompt shows a category made earlier in this layer: its name, and with
    ``existing_descriptions`` the commonest tags of its members so far and a few member names."""
    if not cfg.existing_descriptions:
        return NodeView(d.name, ())
    members = [g.by_id[c] for c in d.children if c in g.by_id]
    return NodeView(d.name, common_tags(members, cfg), [m.name for m in members[: cfg.existing_members]])


def common_tags(children: Sequence[LayerNode], cfg: HierarchyConfig) -> list[str]:
    """The children's tags, commonest first, cleaned and capped."""
    counts = Counter(t for c in children for t in c.tags)
    return clean_tags([t for t, _ in counts.most_common()], cfg.max_tags, cfg.max_tag_words)


def _apply(g: Group, nodes: Sequence[LayerNode], res: LLMResult, cfg: HierarchyConfig) -> None:
    """Merge one categorize reply into the group's drafts; a failed item leaves its nodes unassigned."""
    g.llm_calls += 1
    if not res.ok or not isinstance(res.parsed, Categorization):
        g.llm_failures += 1
        return
    parsed = parse_assignments(
        res.parsed.assignments, len(nodes), g.repairs, max_name_words=cfg.max_name_words
    )
    merge_assignments(g.drafts, parsed, [n.id for n in nodes])


def _run(llm: Any, jobs: list[tuple[Group, Sequence[LayerNode], LLMRequest]], cfg: HierarchyConfig) -> None:
    """One ``generate()`` for all jobs, replies merged into their groups."""
    if not jobs:
        return
    results = llm.generate([req for _, _, req in jobs])
    for (g, nodes, _), res in zip(jobs, results, strict=True):
        _apply(g, nodes, res, cfg)


def categorize(active: list[Group], layer: int, llm: Any, cfg: HierarchyConfig) -> None:
    """First pass: all batches of all groups in one call (or one call per batch round if sequential)."""
    if cfg.sequential_batches:
        rounds = max((len(g.batches) for g in active), default=0)
        for r in range(rounds):
            jobs = [
                (g, g.batches[r], categorize_request(g, layer, g.batches[r], cfg, reask=False))
                for g in active
                if r < len(g.batches)
            ]
            _run(llm, jobs, cfg)
        return
    jobs = [(g, b, categorize_request(g, layer, b, cfg, reask=False)) for g in active for b in g.batches]
    _run(llm, jobs, cfg)


def reask(active: list[Group], layer: int, llm: Any, cfg: HierarchyConfig) -> None:
    """Second pass: every node left without a category, all groups in one call."""
    jobs = []
    for g in active:
        if g.skip_llm:
            continue
        left = unassigned([n.id for n in g.candidates], g.drafts)
        g.reasked += len(left)
        for chunk in balanced_chunks(left, cfg.batch_size):
            nodes = [g.by_id[i] for i in chunk]
            jobs.append((g, nodes, categorize_request(g, layer, nodes, cfg, reask=True)))
    _run(llm, jobs, cfg)


def _fallback_description(
    d: Draft, children: Sequence[LayerNode], cfg: HierarchyConfig
) -> tuple[list[str], str]:
    tags = common_tags(children, cfg)
    names = [c.name for c in children[:10]]
    more = f" and {len(children) - 10} more" if len(children) > 10 else ""
    return tags, f"{d.name}: {', '.join(names)}{more}."


def describe(
    kept: list[Group], layer: int, llm: Any, cfg: HierarchyConfig
) -> dict[tuple[str, str], tuple[list[str], str]]:
    """Tags and summary of every new category of every kept group; one call for all of them."""
    out: dict[tuple[str, str], tuple[list[str], str]] = {}
    jobs: list[tuple[Group, str, LLMRequest]] = []
    for g in kept:
        for key, d in g.drafts.items():
            children = [g.by_id[c] for c in d.children]
            if len(children) == 1:  # promoted (or a one-member Speaker): the child's own description
                out[(g.group_id, key)] = (
                    clean_tags(children[0].tags, cfg.max_tags, cfg.max_tag_words),
                    children[0].summary,
                )
                continue
            out[(g.group_id, key)] = _fallback_description(d, children, cfg)
            if not cfg.describe:
                continue
            shown = children[: cfg.describe_max_children]
            msgs = DESCRIBE_CATEGORY.render(
                d.name,
                layer,
                [ChildView(c.name, c.tags, c.summary) for c in shown],
                omitted=len(children) - len(shown),
                max_summary_chars=cfg.describe_summary_chars,
            )
            jobs.append(
                (
                    g,
                    key,
                    LLMRequest(
                        messages=msgs,
                        schema=CategoryDescription,
                        sampling=cfg.describe_sampling,
                        stage=STAGE_DESCRIBE,
                    ),
                )
            )
    results = llm.generate([j[2] for j in jobs]) if jobs else []
    for (g, key, _), res in zip(jobs, results, strict=True):
        g.llm_calls += 1
        if not res.ok or not isinstance(res.parsed, CategoryDescription):
            g.llm_failures += 1
            continue
        tags = clean_tags(res.parsed.tags, cfg.max_tags, cfg.max_tag_words)
        summary = " ".join(res.parsed.summary.split())
        fallback_tags, fallback_summary = out[(g.group_id, key)]
        out[(g.group_id, key)] = (tags or fallback_tags, summary or fallback_summary)
    return out


