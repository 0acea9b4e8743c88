"""Two-step categorisation of a hierarchy layer (``categorizer: two_step``), for models too small to group a
numbered list in one reply.

1. ``propose``: one request per batch names about ``len(batch) / propose_children`` categories;
2. ``assign``: one request per batch places every node of the batch into 1..``max_parents`` of the names proposed
   for the layer (the batch's own first, then the other batches', at most ``max_existing``); the decoding schema
   requires every node and allows only those names (:mod:`mnemis.prompts.categorize_two_step`);
3. ``reassign`` (the re-ask): nodes left without a category after small categories were dissolved are placed into
   the layer's surviving categories; what is still unplaced is promoted by the build.

Each step is one ``generate()`` for every batch of every group. Batches are sized to the model's window
(``window_tokens``) from an estimate of the prompt and the worst-case reply.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mnemis.hierarchy.constraints import balanced_chunks, clean_name, is_joined_name, merge_assignments, unassigned
from mnemis.hierarchy.state import Group, HierarchyConfig, LayerNode
from mnemis.models.llm.base import LLMRequest, LLMResult
from mnemis.prompts.categorize import NodeView
from mnemis.prompts.categorize_two_step import (
    ASSIGN,
    NAME_CHARS,
    PROPOSE,
    CategoryProposal,
    Placement,
    key_index,
    node_key,
    placement_schema,
    proposal_count,
    proposal_schema,
)
from mnemis.types import normalize_name

STAGE_PROPOSE = PROPOSE.stage
STAGE_ASSIGN = ASSIGN.stage
STAGE_REASSIGN = "hierarchy.reassign"
PROMPT_CHARS_PER_TOKEN = 3.0  # conservative for English names and tags under a BPE vocabulary
FIXED_PROMPT_TOKENS = 500  # system message, instructions and chat template of the assignment prompt
DEFAULT_NAMES_SHOWN = 60  # names listed in an assignment prompt when max_existing is None


def _names_cap(cfg: HierarchyConfig) -> int:
    return cfg.max_existing if cfg.max_existing is not None else DEFAULT_NAMES_SHOWN


def _node_tokens(k: int, node: LayerNode, cfg: HierarchyConfig) -> int:
    """Estimated tokens one node costs an assignment request: its prompt line, and its key and names in the
    worst-case reply (one token per character, as the reply budget counts)."""
    line = len(node.name) + sum(len(t) + 2 for t in node.tags) + 8
    return math.ceil(line / PROMPT_CHARS_PER_TOKEN) + len(node_key(k, node.name)) + 6 + cfg.max_parents * (NAME_CHARS + 4)


def window_batch_size(nodes: Sequence[LayerNode], cfg: HierarchyConfig) -> int:
    """Most nodes per batch such that an assignment request over the costliest of ``nodes`` fits
    ``window_tokens`` (at least 2; ``batch_size`` when no window is configured)."""
    if cfg.window_tokens is None or not nodes:
        return cfg.batch_size
    names = math.ceil(_names_cap(cfg) * (NAME_CHARS / PROMPT_CHARS_PER_TOKEN + 3))
    room = cfg.window_tokens - FIXED_PROMPT_TOKENS - names
    costs = sorted((_node_tokens(cfg.batch_size, n, cfg) for n in nodes), reverse=True)
    fit, used = 0, 0
    for c in costs[: cfg.batch_size]:
        if used + c > room:
            break
        used, fit = used + c, fit + 1
    return max(2, min(cfg.batch_size, fit))


def window_batches(nodes: Sequence[LayerNode], cfg: HierarchyConfig) -> list[list[LayerNode]]:
    by_id = {n.id: n for n in nodes}
    return [[by_id[i] for i in c] for c in balanced_chunks([n.id for n in nodes], window_batch_size(nodes, cfg))]


def _views(nodes: Sequence[LayerNode]) -> list[NodeView]:
    return [NodeView(n.name, n.tags) for n in nodes]


# --------------------------------------------------------------------------- propose
def propose(active: list[Group], layer: int, llm: Any, cfg: HierarchyConfig) -> None:
    """Category names for every batch of every group (one call); ``g.proposals[b]`` are batch ``b``'s."""
    jobs: list[tuple[Group, LLMRequest]] = []
    for g in active:
        g.proposals = []
        for b in g.batches:
            least, most = proposal_count(len(b), cfg.propose_children, cfg.min_children)
            jobs.append((g, LLMRequest(messages=PROPOSE.render(_views(b), layer, least=least, most=most),
                                       schema=proposal_schema(least, most), sampling=cfg.propose_sampling,
                                       stage=STAGE_PROPOSE)))
    results = llm.generate([r for _, r in jobs]) if jobs else []
    for (g, _), res in zip(jobs, results, strict=True):
        g.proposals.append(_proposed_names(g, res, cfg))


def _proposed_names(g: Group, res: LLMResult, cfg: HierarchyConfig) -> list[str]:
    g.llm_calls += 1
    if not res.ok or not isinstance(res.parsed, CategoryProposal):
        g.llm_failures += 1
        return []
    out: dict[str, str] = {}
    for raw in res.parsed.categories:
        name = clean_name(raw, cfg.max_name_words)
        if not name:
            g.repairs.empty_names += 1
        elif is_joined_name(name):
            g.repairs.rejected_names.append(name)
        else:
            out.setdefault(normalize_name(name), name)
    if not out:
        g.repairs.empty_replies += 1
    return list(out.values())


# --------------------------------------------------------------------------- assign
def _shown_names(own: Sequence[str], everything: Sequence[str], cap: int) -> list[str]:
    """The batch's own names first, then the layer's others, distinct by normalised name, at most ``cap``."""
    out: dict[str, str] = {}
    for name in [*own, *everything]:
        if len(out) >= cap:
            break
        out.setdefault(normalize_name(name), name)
    return list(out.values())


def _assign_request(nodes: Sequence[LayerNode], names: Sequence[str], layer: int, cfg: HierarchyConfig,
                    *, reask: bool) -> LLMRequest:
    keys = tuple(node_key(k, n.name) for k, n in enumerate(nodes, start=1))
    return LLMRequest(messages=ASSIGN.render(_views(nodes), layer, list(names), reask=reask),
                      schema=placement_schema(keys, tuple(names), cfg.max_parents), sampling=cfg.assign_sampling,
                      stage=STAGE_REASSIGN if reask else STAGE_ASSIGN)


def assign(active: list[Group], layer: int, llm: Any, cfg: HierarchyConfig) -> None:
    """Every batch's nodes placed into the layer's proposed names (one call); merged into ``g.drafts``."""
    jobs: list[tuple[Group, list[LayerNode], list[str], LLMRequest]] = []
    for g in active:
        everything = [n for names in g.proposals for n in names]
        for b, own in zip(g.batches, g.proposals, strict=True):
            names = _shown_names(own, everything, _names_cap(cfg))
            if names:  # a batch without any name keeps its nodes unplaced: re-asked, then promoted
                jobs.append((g, b, names, _assign_request(b, names, layer, cfg, reask=False)))
    _run(llm, jobs, cfg)


def reassign(active: list[Group], layer: int, llm: Any, cfg: HierarchyConfig) -> None:
    """The re-ask: nodes without a category placed into the layer's surviving LLM-made categories (one call)."""
    jobs: list[tuple[Group, list[LayerNode], list[str], LLMRequest]] = []
    for g in active:
        if g.skip_llm:
            continue
        left = [g.by_id[i] for i in unassigned([n.id for n in g.candidates], g.drafts)]
        kept = [d.name for d in sorted(g.drafts.values(), key=lambda d: -len(d.children))
                if not d.rule and not d.promoted][: _names_cap(cfg)]
        g.reasked += len(left)
        if not left or not kept:
            continue
        for chunk in window_batches(left, cfg):
            jobs.append((g, chunk, kept, _assign_request(chunk, kept, layer, cfg, reask=True)))
    _run(llm, jobs, cfg)


def _run(llm: Any, jobs: list[tuple[Group, list[LayerNode], list[str], LLMRequest]], cfg: HierarchyConfig) -> None:
    results = llm.generate([j[3] for j in jobs]) if jobs else []
    for (g, nodes, names, _), res in zip(jobs, results, strict=True):
        _apply_placement(g, nodes, names, res, cfg)


def _apply_placement(g: Group, nodes: Sequence[LayerNode], names: Sequence[str], res: LLMResult,
                     cfg: HierarchyConfig) -> None:
    """Merge one assignment reply into the group's drafts; unknown keys and names are dropped and counted."""
    g.llm_calls += 1
    if not res.ok or not isinstance(res.parsed, Placement):
        g.llm_failures += 1
        return
    allowed = {normalize_name(n): n for n in names}
    members: dict[str, list[int]] = {}
    for key, cats in res.parsed.placements.items():
        i = key_index(key, len(nodes))
        if i is None:
            g.repairs.out_of_range += 1
            continue
        chosen: list[str] = []
        for c in cats if isinstance(cats, list) else []:
            name = allowed.get(normalize_name(c)) if isinstance(c, str) else None
            if name is None:
                g.repairs.unknown_categories += 1
            elif name in chosen:
                g.repairs.duplicate_indexes += 1
            elif len(chosen) < cfg.max_parents:
                chosen.append(name)
        for name in chosen:
            if i not in members.setdefault(name, []):
                members[name].append(i)
    if not members:
        g.repairs.empty_replies += 1
    merge_assignments(g.drafts, list(members.items()), [n.id for n in nodes])
