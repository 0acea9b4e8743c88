"""Hierarchy construction: category layers over the entities, batched across groups (the paper).

Layer 0 is the entities. For each layer ``i = 1..max_layers`` every unfinished group takes the same
steps, and each LLM step is **one** ``generate()`` call holding the requests of all groups:

1. categorize (``categorizer: one_step``, the paper's form): the layer ``i-1`` nodes in indexed batches (at layer 1 the speaker entities go to a
   rule-made "Speaker" category instead; it then takes part in higher layers like any node). By
   default all batches go in one call; with ``sequential_batches`` (the paper) batch *k* of every
   group goes in call *k*, after the categories of batches < *k* exist, and each prompt lists them
   (with ``existing_descriptions``: by their members' commonest tags and a few member names).
   With ``categorizer: two_step`` (:mod:`mnemis.hierarchy.two_step`) each window-sized batch first gets category
   names proposed, then every node is placed into one or more of the layer's names (two calls; with
   ``assign_by: embedding`` the placement is by embedding similarity, :mod:`mnemis.hierarchy.embed_assign`);
2. dissolve categories with fewer than ``min_children`` children; re-ask once for every node left
   without a category (one call), dissolve again, promote what is still unassigned
   (``constraints.promote``);
3. from layer 2 on, discard the layer and stop if it is not smaller than the layer below;
4. describe: tags and a summary for every new category with two or more children (one call);
   single-child categories (promoted nodes) copy their child's tags and summary.

A group stops at ``max_layers``, when a layer has one node, or by rule 3; with ``top_width`` also when a layer
has at most that many nodes, and a layer (from 2 on) that closes into a single root is discarded instead. A group with fewer than
two entities gets a trivial hierarchy without any LLM call. ``organize`` reads the entities from the
store, builds, commits every layer as it is made (``replace_hierarchy`` + a progress record, so a killed
build resumes at its first unfinished layer: ``mnemis.hierarchy.progress``) and returns the quality metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mnemis.hierarchy.calls import (  # noqa: F401  (the stage names are re-exported)
    STAGE_CATEGORIZE,
    STAGE_DESCRIBE,
    STAGE_REASK,
    categorize,
    common_tags,
    describe,
    reask,
)
from mnemis.hierarchy.constraints import (
    Draft,
    balanced_chunks,
    dissolve_small,
    layer_shrinks,
    promote,
    unassigned,
)
from mnemis.hierarchy.metrics import HierarchyMetrics, compute_metrics
from mnemis.hierarchy.progress import LayerProgress, fingerprint, load_progress, save_progress
from mnemis.hierarchy.state import BuiltHierarchy, Group, HierarchyConfig, LayerNode, LayerSnapshot
from mnemis.hierarchy.embed_assign import assign_by_embedding, reassign_by_embedding
from mnemis.hierarchy.two_step import assign, propose, reassign, window_batches
from mnemis.types import Category, CategoryEdge, Entity, category_id, normalize_name

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- layer steps
def _start_layer(g: Group, layer: int, cfg: HierarchyConfig) -> None:
    g.drafts = {}
    g.by_id = {n.id: n for n in g.lower}
    if layer == 1:
        speakers = [n for n in g.lower if n.is_speaker]
        if speakers:
            g.drafts[normalize_name(cfg.speaker_category)] = Draft(
                cfg.speaker_category, [n.id for n in speakers], rule=True
            )
        g.candidates = [n for n in g.lower if not n.is_speaker]
    else:
        g.candidates = list(g.lower)
    g.skip_llm = len(g.candidates) < max(2, cfg.min_children)
    ids = [n.id for n in g.candidates]
    if g.skip_llm:
        g.batches = []
    elif cfg.categorizer == "two_step":
        g.batches = window_batches(g.candidates, cfg)
    else:
        g.batches = [[g.by_id[i] for i in c] for c in balanced_chunks(ids, cfg.batch_size)]


def _close_layer(g: Group, layer: int, cfg: HierarchyConfig) -> bool:
    """Dissolve, promote and apply the shrink rule; False when the layer is discarded."""
    g.dissolved += len(dissolve_small(g.drafts, cfg.min_children, cfg.keep_single_member))
    left = unassigned([n.id for n in g.candidates], g.drafts)
    promote(g.drafts, [(i, g.by_id[i].name) for i in left], g.repairs)
    if not layer_shrinks(layer, len(g.drafts), len(g.lower), cfg.layer_rule):
        g.done, g.stop_reason, g.discarded = True, "no_shrink", len(g.drafts)
        return False
    if layer >= 2 and len(g.drafts) == len(g.lower) and all(len(d.children) == 1 for d in g.drafts.values()):
        g.done, g.stop_reason, g.discarded = True, "no_merge", len(g.drafts)  # the same layer again
        return False
    if cfg.top_width is not None and layer >= 2 and len(g.drafts) == 1 and len(g.lower) >= 2:
        g.done, g.stop_reason, g.discarded = True, "single_root", 1  # the layer below stays the (wider) top
        return False
    return True


def _commit_layer(
    g: Group, layer: int, desc: Mapping[tuple[str, str], tuple[list[str], str]], cfg: HierarchyConfig
) -> None:
    new_nodes: list[LayerNode] = []
    for key, d in g.drafts.items():
        tags, summary = desc[(g.group_id, key)]
        cid = category_id(g.group_id, layer, d.name)
        g.categories.append(
            Category(
                group_id=g.group_id,
                id=cid,
                name=d.name,
                layer=layer,
                tags=tags,
                summary=summary,
                promoted=d.promoted,
            )
        )
        g.edges.extend(CategoryEdge(group_id=g.group_id, parent_id=cid, child_id=c) for c in d.children)
        new_nodes.append(LayerNode(cid, d.name, tuple(tags), summary))
    g.lower = new_nodes
    if len(new_nodes) <= 1:
        g.done, g.stop_reason = True, "single_node"
    elif layer == cfg.max_layers:
        g.done, g.stop_reason = True, "max_layers"
    elif cfg.top_width is not None and len(new_nodes) <= cfg.top_width:
        g.done, g.stop_reason = True, "top_width"


# --------------------------------------------------------------------------- entry points
def build_hierarchies(
    entities_by_group: Mapping[str, Sequence[Entity]],
    llm: Any,
    cfg: HierarchyConfig | Mapping | None = None,
    *,
    resume: Mapping[str, tuple[LayerProgress, Sequence[Category], Sequence[CategoryEdge]]] | None = None,
    on_layer: Callable[[int, list[LayerSnapshot]], None] | None = None,
    embedder: Any = None,
) -> dict[str, BuiltHierarchy]:
    """Build the hierarchy of every group, layer by layer, each LLM step batched across groups.

    ``resume``: per group, a progress record with the categories and edges committed with it; the group
    continues at ``next_layer`` (nothing is asked again for finished layers). ``on_layer(layer,
    snapshots)``: called after each layer with every group that took part in it (e.g. to commit).
    """
    cfg = HierarchyConfig.coerce(cfg)
    by_embedding = cfg.categorizer == "two_step" and cfg.assign_by == "embedding"
    if by_embedding and embedder is None:
        raise ValueError("hierarchy.assign_by=embedding places nodes with the embedder, but none was given "
                         "(build_hierarchies(..., embedder=...); Memory passes its own)")
    groups = [
        Group(
            gid, list(ents), [LayerNode(e.id, e.name, tuple(e.tags), e.summary, e.is_speaker) for e in ents]
        )
        for gid, ents in entities_by_group.items()
    ]
    for g in groups:
        if g.group_id in (resume or {}):
            g.restore(*resume[g.group_id])  # type: ignore[index]
        elif not g.lower:
            g.done, g.stop_reason = True, "empty"
    for layer in range(1, cfg.max_layers + 1):
        active = [g for g in groups if not g.done and g.next_layer == layer]
        if not active:
            continue
        for g in active:
            _start_layer(g, layer, cfg)
        two_step = cfg.categorizer == "two_step"
        if two_step:
            propose(active, layer, llm, cfg)
            if by_embedding:
                assign_by_embedding(active, layer, embedder, cfg)
            else:
                assign(active, layer, llm, cfg)
        else:
            categorize(active, layer, llm, cfg)
        for g in active:
            g.dissolved += len(dissolve_small(g.drafts, cfg.min_children, cfg.keep_single_member))
        if cfg.reask and by_embedding:
            reassign_by_embedding(active, layer, embedder, cfg)
        elif cfg.reask:
            (reassign if two_step else reask)(active, layer, llm, cfg)
        kept = [g for g in active if _close_layer(g, layer, cfg)]
        desc = describe(kept, layer, llm, cfg)
        for g in kept:
            _commit_layer(g, layer, desc, cfg)
        for g in active:
            g.next_layer = layer + 1
        log.info(
            "hierarchy layer %d: %d groups built, sizes %s",
            layer,
            len(kept),
            {g.group_id: len(g.lower) for g in kept},
        )
        if on_layer is not None:
            on_layer(layer, [LayerSnapshot(g.group_id, list(g.categories), list(g.edges), g.progress())
                             for g in active])
    out: dict[str, BuiltHierarchy] = {}
    for g in groups:
        metrics = compute_metrics(
            g.group_id,
            g.entities,
            g.categories,
            g.edges,
            dissolved=g.dissolved,
            rejected_names=g.repairs.rejected_names,
            repairs=g.repairs.as_dict(),
            reasked_nodes=g.reasked,
            llm_calls=g.llm_calls,
            llm_failures=g.llm_failures,
            stop_reason=g.stop_reason,
            discarded_layer_size=g.discarded,
        )
        out[g.group_id] = BuiltHierarchy(g.group_id, g.categories, g.edges, metrics, g.progress())
    return out


def category_text(c: Category) -> str:
    """The text embedded for a category: name and summary."""
    return f"{c.name}: {c.summary}" if c.summary else c.name


def organize(
    store: Any,
    llm: Any,
    group_ids: Iterable[str],
    cfg: HierarchyConfig | Mapping | None = None,
    *,
    embedder: Any = None,
) -> dict[str, HierarchyMetrics]:
    """Rebuild the hierarchy of ``group_ids`` from the entities in ``store``; returns metrics per group.

    Every layer is committed as it is built: the group's categories and edges so far replace the old
    ones, with a progress record (``mnemis.hierarchy.progress``), in one transaction for all groups of
    the layer. A killed build, rerun with the same entities, config and model, resumes at its first
    unfinished layer; a finished one returns its stored result without any LLM call. With an
    ``embedder``, every category's name + summary is embedded (one ``encode`` call) as kind "category".
    """
    cfg = HierarchyConfig.coerce(cfg)
    entities = {g: store.entities(g) for g in dict.fromkeys(group_ids)}
    model_id = str(getattr(llm, "model_id", ""))
    fps = {g: fingerprint(ents, cfg, model_id) for g, ents in entities.items()}
    resume = {}
    for g, fp in fps.items():
        rec = load_progress(store, g, fp)
        if rec is not None:
            resume[g] = (rec, store.categories(g), store.category_edges(g))
            log.info("hierarchy of %s: resuming at layer %d (done: %s)", g, rec.next_layer, rec.done)

    def commit(layer: int, snaps: list[LayerSnapshot]) -> None:
        with store.transaction():
            for snap in snaps:
                store.replace_hierarchy(snap.group_id, snap.categories, snap.edges)
                rec = snap.progress.model_copy(update={"fingerprint": fps[snap.group_id]})
                save_progress(store, snap.group_id, rec)

    built = build_hierarchies(entities, llm, cfg, resume=resume, on_layer=commit, embedder=embedder)
    finished = {g for g, (rec, _, _) in resume.items() if rec.done}
    with store.transaction():  # groups without a layer this time (no entities) are recorded too
        for gid, b in built.items():
            if gid not in finished:
                store.replace_hierarchy(gid, b.categories, b.edges)
                rec = b.progress.model_copy(update={"fingerprint": fps[gid], "done": True})
                save_progress(store, gid, rec)
    if embedder is not None:
        todo = [g for g in built if g not in finished or not store.embedded_ids(g, "category")]
        rows = [(gid, c) for gid in todo for c in built[gid].categories]
        if rows:
            vecs = embedder.encode([category_text(c) for _, c in rows], kind="document")
            by_group: dict[str, list[int]] = {}
            for r, (gid, _) in enumerate(rows):
                by_group.setdefault(gid, []).append(r)
            for gid, idx in by_group.items():
                store.put_embeddings(gid, "category", [rows[r][1].id for r in idx], vecs[idx])
    return {gid: b.metrics for gid, b in built.items()}
