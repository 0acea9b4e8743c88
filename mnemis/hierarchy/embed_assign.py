"""Placement of a layer's nodes into the proposed category names by embedding similarity
(``categorizer: two_step`` with ``assign_by: embedding``; our own design, an ablation in the fidelity ledger).

The LLM still proposes every category name (:func:`mnemis.hierarchy.two_step.propose`) and describes every
category; only the placement is made by the embedder: a node (its name, tags and summary, embedded as a document)
goes into the proposed name it is most similar to (the name embedded as a query), plus every further name whose
cosine similarity lies within ``second_parent_margin`` of the best one, up to ``max_parents``. A small model asked
to place a list of nodes puts most of them into the first names it is offered; the embedder has no such order
effect. The re-ask places the nodes left without a category (their category was dissolved as too small) into the
layer's surviving categories the same way. One ``encode`` call for the nodes and one for the names, across groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mnemis.hierarchy.constraints import merge_assignments, unassigned
from mnemis.hierarchy.state import Group, HierarchyConfig, LayerNode
from mnemis.types import normalize_name


def node_text(node: LayerNode, summary_chars: int) -> str:
    """What a node is, as the embedder reads it: ``name [tag, tag]: summary`` (the summary cut)."""
    tags = ", ".join(t for t in node.tags if t)
    head = f"{node.name} [{tags}]" if tags else node.name
    summary = " ".join((node.summary or "").split())[:summary_chars]
    return f"{head}: {summary}" if summary else head


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms > 0, norms, 1.0)


def choose(sims: np.ndarray, margin: float, most: int) -> list[list[int]]:
    """Per row of ``sims`` (nodes x names): the best column, then the others within ``margin`` of it, best first,
    at most ``most`` (ties go to the earlier column)."""
    out: list[list[int]] = []
    for row in np.asarray(sims, dtype=np.float64):
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))
        best = row[order[0]]
        out.append([j for j in order if row[j] >= best - margin][: max(1, most)])
    return out


def _distinct(names: Sequence[str]) -> list[str]:
    out: dict[str, str] = {}
    for n in names:
        out.setdefault(normalize_name(n), n)
    return list(out.values())


def _place(jobs: list[tuple[Group, list[LayerNode], list[str]]], embedder: Any, cfg: HierarchyConfig) -> None:
    """Place every job's nodes into its names; one encode call for all nodes, one for all names."""
    jobs = [(g, nodes, names) for g, nodes, names in jobs if nodes and names]
    if not jobs:
        return
    texts = [node_text(n, cfg.describe_summary_chars) for _, nodes, _ in jobs for n in nodes]
    labels = list(dict.fromkeys(name for _, _, names in jobs for name in names))
    node_vecs = _unit(embedder.encode(texts, kind="document"))
    name_vecs = _unit(embedder.encode(labels, kind="query"))
    col = {name: j for j, name in enumerate(labels)}
    row = 0
    for g, nodes, names in jobs:
        cols = [col[n] for n in names]
        sims = node_vecs[row: row + len(nodes)] @ name_vecs[cols].T
        row += len(nodes)
        members: dict[str, list[int]] = {}
        for i, picks in enumerate(choose(sims, cfg.second_parent_margin, cfg.max_parents)):
            for j in picks:
                members.setdefault(names[j], []).append(i)
        merge_assignments(g.drafts, list(members.items()), [n.id for n in nodes])


def assign_by_embedding(active: list[Group], layer: int, embedder: Any, cfg: HierarchyConfig) -> None:
    """Every candidate node of every group placed into the names proposed for its layer (all batches')."""
    del layer  # the same rule on every layer
    jobs = []
    for g in active:
        names = _distinct([n for names in g.proposals for n in names])
        jobs.append((g, [n for b in g.batches for n in b], names))
    _place(jobs, embedder, cfg)


def reassign_by_embedding(active: list[Group], layer: int, embedder: Any, cfg: HierarchyConfig) -> None:
    """The re-ask: nodes without a category placed into the layer's surviving LLM-made categories."""
    del layer
    jobs = []
    for g in active:
        if g.skip_llm:
            continue
        left = [g.by_id[i] for i in unassigned([n.id for n in g.candidates], g.drafts)]
        kept = [d.name for d in g.drafts.values() if not d.rule and not d.promoted]
        g.reasked += len(left)
        jobs.append((g, left, kept))
    _place(jobs, embedder, cfg)
