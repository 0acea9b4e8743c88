"""The records of a hierarchy build: its settings, the nodes a layer sees, one group's build state, and what a
finished (or stopped) build hands back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from mnemis.hierarchy.constraints import (
    Draft,
    Repairs,
)
from mnemis.hierarchy.metrics import HierarchyMetrics
from mnemis.hierarchy.progress import LayerProgress
from mnemis.models.llm.base import Sampling
from mnemis.types import Category, CategoryEdge, Entity


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
    keep_single_member: bool = Field(False, description="keep a one-member category the LLM named (the paper's "
                                     "prompt allows it) instead of dissolving it below min_children")
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
    min_assignments: int = Field(
        1, ge=0, description="decoding minimum: a categorisation reply holds at least this many categories, each "
        "of at least min_children nodes (0: none, as the paper's unconstrained model; a small model may then reply "
        "with no category at all)")
    categorizer: Literal["one_step", "two_step"] = Field(
        "one_step", description="one_step: one reply groups a numbered batch (the paper's form; the library "
        "default); two_step: propose category names over a batch, then place every node into one or more of them "
        "under a schema that requires every node and allows only the proposed names (conf/hierarchy: our default)")
    propose_children: int = Field(
        4, ge=1, description="(two_step) one category name is asked for per this many nodes of a batch")
    max_parents: int = Field(2, ge=1, description="(two_step) most categories one node may be placed in")
    assign_by: Literal["llm", "embedding"] = Field(
        "llm", description="(two_step) who places the nodes into the proposed names: llm (one reply per batch, "
        "under a schema that requires every node) or embedding (each node into the name most similar to its name, "
        "tags and summary by the configured embedder, plus those within second_parent_margin of it, up to "
        "max_parents; the LLM still proposes and describes every category)")
    second_parent_margin: float = Field(
        0.05, ge=0.0, description="(assign_by=embedding) a further category is kept when its cosine similarity is "
        "within this of the best one's")
    top_width: int | None = Field(
        None, ge=2, description="a layer of at most this many nodes is the top (no layer is built above it), and "
        "from layer 2 on a layer that closes into a single root is discarded; None: neither (the paper)")
    window_tokens: int | None = Field(
        None, ge=512, description="(two_step) the model's window: batches shrink until the estimated prompt and "
        "worst-case reply fit; None: batch_size alone")
    propose_sampling: Sampling = Field(default_factory=lambda: Sampling(max_tokens=256))
    assign_sampling: Sampling = Field(default_factory=lambda: Sampling(max_tokens=0))
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
class Group:
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
    proposals: list[list[str]] = field(default_factory=list)  # (two_step) names proposed per batch
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


