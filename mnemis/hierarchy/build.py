"""Hierarchy construction: category layers over the entities, batched across groups (REFERENCE §3).

Layer 0 is the entities. For each layer ``i = 1..max_layers`` every unfinished group takes the same
steps, and each LLM step is **one** ``generate()`` call holding the requests of all groups:

1. categorize: the layer ``i-1`` nodes in indexed batches (at layer 1 the speaker entities go to a
   rule-made "Speaker" category instead; it then takes part in higher layers like any node). By
   default all batches go in one call; with ``sequential_batches`` (the paper) batch *k* of every
   group goes in call *k*, after the categories of batches < *k* exist, and each prompt lists them
   (with ``existing_descriptions``: by their members' commonest tags and a few member names);
2. dissolve categories with fewer than ``min_children`` children; re-ask once for every node left
   without a category (one call), dissolve again, promote what is still unassigned
   (``constraints.promote``);
3. from layer 2 on, discard the layer and stop if it is not smaller than the layer below;
4. describe: tags and a summary for every new category with two or more children (one call);
   single-child categories (promoted nodes) copy their child's tags and summary.

A group stops at ``max_layers``, when a layer has one node, or by rule 3. A group with fewer than
two entities gets a trivial hierarchy without any LLM call. ``organize`` reads the entities from the
store, builds, commits every layer as it is made (``replace_hierarchy`` + a progress record, so a killed
build resumes at its first unfinished layer: ``mnemis.hierarchy.progress``) and returns the quality metrics.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from mnemis.hierarchy.constraints import (
    Draft,
    Repairs,
    balanced_chunks,
    clean_tags,
    dissolve_small,
    layer_shrinks,
    merge_assignments,
    parse_assignments,
    promote,
    unassigned,
)
from mnemis.hierarchy.metrics import HierarchyMetrics, compute_metrics
from mnemis.hierarchy.progress import LayerProgress, fingerprint, load_progress, save_progress
from mnemis.models.llm.base import LLMRequest, LLMResult, Sampling
from mnemis.prompts.categorize import CATEGORIZE, Categorization, NodeView, bounded_categorization
from mnemis.prompts.categorize_paper import CATEGORIZE_PAPER
from mnemis.prompts.describe_category import DESCRIBE_CATEGORY, CategoryDescription, ChildView
from mnemis.types import Category, CategoryEdge, Entity, category_id, normalize_name

log = logging.getLogger(__name__)

STAGE_CATEGORIZE = "hierarchy.categorize"
STAGE_REASK = "hierarchy.reask"
STAGE_DESCRIBE = "hierarchy.describe"


class HierarchyConfig(BaseModel):
    """Knobs of the construction (``conf/hierarchy/default.yaml``)."""

    model_config = {"extra": "forbid"}

    min_children: int = Field(2, ge=1, description="compression ratio n: fewest children of a category")
    max_layers: int = Field(5, ge=1)
    batch_size: int = Field(40, ge=2, description="nodes per categorize request")
    sequential_batches: bool = Field(
        False,
        description="send batch k of every group after batches < k, showing their categories (more calls)",
    )
    existing_descriptions: bool = Field(
        False,
        description="describe each existing category shown in a prompt by its members' commonest tags and "
        "a few member names (else its name only)",
    )
    existing_members: int = Field(3, ge=0, description="member names in an existing category's description")
    reask: bool = True
    max_existing: int | None = Field(
        60, ge=0, description="existing categories shown in a prompt (largest first); None = all"
    )
    speaker_category: str = "Speaker"
    max_name_words: int = 6
    max_tags: int = 5
    max_tag_words: int = 3
    describe: bool = True
    describe_max_children: int = 30
    describe_summary_chars: int = 200
    prompt: Literal["ours", "paper"] = Field(
        "ours", description="categorisation prompt: ours (mnemis.prompts.categorize) or paper (the scaffolding of "
        "the paper's prompt: layer 1-4 examples, tag definition, the previous layer's grouping)")
    previous_examples: int = Field(3, ge=0, description="(prompt=paper) previous-layer categories shown")
    layer_rule: Literal["shrink", "no_growth"] = Field(
        "shrink", description="shrink: a layer must be smaller than the one below; no_growth: not larger (the "
        "paper); a layer of the same size that merged nothing ends the build either way")
    categorize_sampling: Sampling = Field(default_factory=lambda: Sampling(max_tokens=1024))
    describe_sampling: Sampling = Field(default_factory=lambda: Sampling(max_tokens=256))

    @classmethod
    def coerce(cls, cfg: Any) -> HierarchyConfig:
        """Accept a config or a mapping of its keys (``_target_`` ignored); None = defaults."""
        if cfg is None:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        return cls.model_validate({k: v for k, v in dict(cfg).items() if k != "_target_"})


@dataclass(frozen=True)
class LayerNode:
    """One node as the layer above sees it."""

    id: str
    name: str
    tags: tuple[str, ...] = ()
    summary: str = ""
    is_speaker: bool = False


@dataclass
class BuiltHierarchy:
    group_id: str
    categories: list[Category]
    edges: list[CategoryEdge]
    metrics: HierarchyMetrics
    progress: LayerProgress = field(default_factory=LayerProgress)


@dataclass
class _Group:
    """Build state of one group."""

    group_id: str
    entities: list[Entity]
    lower: list[LayerNode]
    categories: list[Category] = field(default_factory=list)
    edges: list[CategoryEdge] = field(default_factory=list)
    repairs: Repairs = field(default_factory=Repairs)
    dissolved: int = 0
    reasked: int = 0
    llm_calls: int = 0
    llm_failures: int = 0
    stop_reason: str = ""
    discarded: int | None = None
    done: bool = False
    next_layer: int = 1
    # scratch of the layer under construction
    drafts: dict[str, Draft] = field(default_factory=dict)
    candidates: list[LayerNode] = field(default_factory=list)
    batches: list[list[LayerNode]] = field(default_factory=list)
    by_id: dict[str, LayerNode] = field(default_factory=dict)
    skip_llm: bool = False


    def progress(self) -> LayerProgress:
        return LayerProgress(
            next_layer=self.next_layer, done=self.done, stop_reason=self.stop_reason,
            discarded=self.discarded, dissolved=self.dissolved, reasked=self.reasked,
            llm_calls=self.llm_calls, llm_failures=self.llm_failures, repairs=asdict(self.repairs),
        )

    def restore(
        self, rec: LayerProgress, categories: Sequence[Category], edges: Sequence[CategoryEdge]
    ) -> None:
        """Continue from a stored record and the categories/edges committed with it."""
        self.categories, self.edges = list(categories), list(edges)
        self.next_layer, self.done, self.stop_reason = rec.next_layer, rec.done, rec.stop_reason
        self.discarded, self.dissolved, self.reasked = rec.discarded, rec.dissolved, rec.reasked
        self.llm_calls, self.llm_failures = rec.llm_calls, rec.llm_failures
        self.repairs = Repairs(**rec.repairs)
        if rec.next_layer > 1:  # the last committed layer, in commit order, is the next one's input
            top = rec.next_layer - 1
            self.lower = [
                LayerNode(c.id, c.name, tuple(c.tags), c.summary) for c in categories if c.layer == top
            ]


@dataclass
class LayerSnapshot:
    """One group's hierarchy after a layer, as ``build_hierarchies`` hands it to ``on_layer``."""

    group_id: str
    categories: list[Category]
    edges: list[CategoryEdge]
    progress: LayerProgress


# --------------------------------------------------------------------------- requests
def _categorize_request(
    g: _Group, layer: int, nodes: Sequence[LayerNode], cfg: HierarchyConfig, *, reask: bool
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
        schema=bounded_categorization(len(nodes)),
        sampling=cfg.categorize_sampling,
        stage=STAGE_REASK if reask else STAGE_CATEGORIZE,
    )


def _previous_example(g: _Group, layer: int, k: int) -> list[NodeView]:
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


def _existing_view(g: _Group, d: Draft, cfg: HierarchyConfig) -> NodeView:
    """How a prompt shows a category made earlier in this layer: its name, and with
    ``existing_descriptions`` the commonest tags of its members so far and a few member names."""
    if not cfg.existing_descriptions:
        return NodeView(d.name, ())
    members = [g.by_id[c] for c in d.children if c in g.by_id]
    return NodeView(d.name, _common_tags(members, cfg), [m.name for m in members[: cfg.existing_members]])


def _common_tags(children: Sequence[LayerNode], cfg: HierarchyConfig) -> list[str]:
    """The children's tags, commonest first, cleaned and capped."""
    counts = Counter(t for c in children for t in c.tags)
    return clean_tags([t for t, _ in counts.most_common()], cfg.max_tags, cfg.max_tag_words)


def _apply(g: _Group, nodes: Sequence[LayerNode], res: LLMResult, cfg: HierarchyConfig) -> None:
    """Merge one categorize reply into the group's drafts; a failed item leaves its nodes unassigned."""
    g.llm_calls += 1
    if not res.ok or not isinstance(res.parsed, Categorization):
        g.llm_failures += 1
        return
    parsed = parse_assignments(
        res.parsed.assignments, len(nodes), g.repairs, max_name_words=cfg.max_name_words
    )
    merge_assignments(g.drafts, parsed, [n.id for n in nodes])


def _run(llm: Any, jobs: list[tuple[_Group, Sequence[LayerNode], LLMRequest]], cfg: HierarchyConfig) -> None:
    """One ``generate()`` for all jobs, replies merged into their groups."""
    if not jobs:
        return
    results = llm.generate([req for _, _, req in jobs])
    for (g, nodes, _), res in zip(jobs, results, strict=True):
        _apply(g, nodes, res, cfg)


# --------------------------------------------------------------------------- layer steps
def _start_layer(g: _Group, layer: int, cfg: HierarchyConfig) -> None:
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
    g.batches = [] if g.skip_llm else [[g.by_id[i] for i in c] for c in balanced_chunks(ids, cfg.batch_size)]


def _categorize(active: list[_Group], layer: int, llm: Any, cfg: HierarchyConfig) -> None:
    """First pass: all batches of all groups in one call (or one call per batch round if sequential)."""
    if cfg.sequential_batches:
        rounds = max((len(g.batches) for g in active), default=0)
        for r in range(rounds):
            jobs = [
                (g, g.batches[r], _categorize_request(g, layer, g.batches[r], cfg, reask=False))
                for g in active
                if r < len(g.batches)
            ]
            _run(llm, jobs, cfg)
        return
    jobs = [(g, b, _categorize_request(g, layer, b, cfg, reask=False)) for g in active for b in g.batches]
    _run(llm, jobs, cfg)


def _reask(active: list[_Group], layer: int, llm: Any, cfg: HierarchyConfig) -> None:
    """Second pass: every node left without a category, all groups in one call."""
    jobs = []
    for g in active:
        if g.skip_llm:
            continue
        left = unassigned([n.id for n in g.candidates], g.drafts)
        g.reasked += len(left)
        for chunk in balanced_chunks(left, cfg.batch_size):
            nodes = [g.by_id[i] for i in chunk]
            jobs.append((g, nodes, _categorize_request(g, layer, nodes, cfg, reask=True)))
    _run(llm, jobs, cfg)


def _fallback_description(
    d: Draft, children: Sequence[LayerNode], cfg: HierarchyConfig
) -> tuple[list[str], str]:
    tags = _common_tags(children, cfg)
    names = [c.name for c in children[:10]]
    more = f" and {len(children) - 10} more" if len(children) > 10 else ""
    return tags, f"{d.name}: {', '.join(names)}{more}."


def _describe(
    kept: list[_Group], layer: int, llm: Any, cfg: HierarchyConfig
) -> dict[tuple[str, str], tuple[list[str], str]]:
    """Tags and summary of every new category of every kept group; one call for all of them."""
    out: dict[tuple[str, str], tuple[list[str], str]] = {}
    jobs: list[tuple[_Group, str, LLMRequest]] = []
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


def _close_layer(g: _Group, layer: int, cfg: HierarchyConfig) -> bool:
    """Dissolve, promote and apply the shrink rule; False when the layer is discarded."""
    g.dissolved += len(dissolve_small(g.drafts, cfg.min_children))
    left = unassigned([n.id for n in g.candidates], g.drafts)
    promote(g.drafts, [(i, g.by_id[i].name) for i in left], g.repairs)
    if not layer_shrinks(layer, len(g.drafts), len(g.lower), cfg.layer_rule):
        g.done, g.stop_reason, g.discarded = True, "no_shrink", len(g.drafts)
        return False
    if layer >= 2 and len(g.drafts) == len(g.lower) and all(len(d.children) == 1 for d in g.drafts.values()):
        g.done, g.stop_reason, g.discarded = True, "no_merge", len(g.drafts)  # the same layer again
        return False
    return True


def _commit_layer(
    g: _Group, layer: int, desc: Mapping[tuple[str, str], tuple[list[str], str]], cfg: HierarchyConfig
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


# --------------------------------------------------------------------------- entry points
def build_hierarchies(
    entities_by_group: Mapping[str, Sequence[Entity]],
    llm: Any,
    cfg: HierarchyConfig | Mapping | None = None,
    *,
    resume: Mapping[str, tuple[LayerProgress, Sequence[Category], Sequence[CategoryEdge]]] | None = None,
    on_layer: Callable[[int, list[LayerSnapshot]], None] | None = None,
) -> dict[str, BuiltHierarchy]:
    """Build the hierarchy of every group, layer by layer, each LLM step batched across groups.

    ``resume``: per group, a progress record with the categories and edges committed with it; the group
    continues at ``next_layer`` (nothing is asked again for finished layers). ``on_layer(layer,
    snapshots)``: called after each layer with every group that took part in it (e.g. to commit).
    """
    cfg = HierarchyConfig.coerce(cfg)
    groups = [
        _Group(
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
        _categorize(active, layer, llm, cfg)
        for g in active:
            g.dissolved += len(dissolve_small(g.drafts, cfg.min_children))
        if cfg.reask:
            _reask(active, layer, llm, cfg)
        kept = [g for g in active if _close_layer(g, layer, cfg)]
        desc = _describe(kept, layer, llm, cfg)
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

    built = build_hierarchies(entities, llm, cfg, resume=resume, on_layer=commit)
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
