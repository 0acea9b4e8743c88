"""Quality metrics of one group's hierarchy, computed from the built structure (JSON-serialisable)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from mnemis.types import Category, CategoryEdge, Entity


class HierarchyMetrics(BaseModel):
    """What the build did and what the result looks like, for one group."""

    group_id: str
    entities: int
    layers: int = Field(description="number of category layers kept (0 when the group has no entity)")
    nodes_per_layer: list[int] = Field(description="index 0 = entities, index i = categories of layer i")
    compression_per_layer: list[float] = Field(
        description="|layer i-1| / |layer i| for i = 1..layers (above 1 means the layer compresses)"
    )
    mean_children_per_layer: list[float] = Field(description="mean children per category, layers 1..layers")
    coverage: float = Field(description="share of entities reachable from the top layer (must be 1.0)")
    multi_parent_rate: float = Field(
        description="share of nodes below the top layer with two or more parents"
    )
    promoted: int = Field(description="single-child categories carrying a lower node up unchanged")
    dissolved: int = Field(description="categories dissolved for having fewer than n children")
    rejected_names: list[str] = Field(default_factory=list, description="names joining two concepts")
    repairs: dict[str, int] = Field(default_factory=dict)
    reasked_nodes: int = 0
    llm_calls: int = 0
    llm_failures: int = 0
    stop_reason: str = ""
    discarded_layer_size: int | None = None


def reachable_entities(
    categories: Sequence[Category], edges: Sequence[CategoryEdge], entity_ids: set[str]
) -> set[str]:
    """Entities reached from the top-layer categories by following parent→child edges."""
    if not categories:
        return set()
    top = max(c.layer for c in categories)
    children: dict[str, list[str]] = {}
    for e in edges:
        children.setdefault(e.parent_id, []).append(e.child_id)
    stack = [c.id for c in categories if c.layer == top]
    seen: set[str] = set(stack)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen & entity_ids


def compute_metrics(
    group_id: str,
    entities: Sequence[Entity],
    categories: Sequence[Category],
    edges: Sequence[CategoryEdge],
    *,
    dissolved: int = 0,
    rejected_names: Sequence[str] = (),
    repairs: Mapping[str, int] | None = None,
    reasked_nodes: int = 0,
    llm_calls: int = 0,
    llm_failures: int = 0,
    stop_reason: str = "",
    discarded_layer_size: int | None = None,
) -> HierarchyMetrics:
    """Structure metrics from the stored rows plus the build counters passed in."""
    entity_ids = {e.id for e in entities}
    layers = max((c.layer for c in categories), default=0)
    sizes = [len(entities)] + [sum(1 for c in categories if c.layer == i) for i in range(1, layers + 1)]
    kids = Counter(e.parent_id for e in edges)
    compression = [round(sizes[i - 1] / sizes[i], 4) if sizes[i] else 0.0 for i in range(1, layers + 1)]
    mean_kids = []
    for i in range(1, layers + 1):
        ids = [c.id for c in categories if c.layer == i]
        mean_kids.append(round(sum(kids[c] for c in ids) / len(ids), 4) if ids else 0.0)
    parents = Counter(e.child_id for e in edges)
    below_top = [e.id for e in entities] + [c.id for c in categories if c.layer < layers]
    multi = sum(1 for n in below_top if parents[n] >= 2)
    coverage = len(reachable_entities(categories, edges, entity_ids)) / len(entity_ids) if entity_ids else 1.0
    return HierarchyMetrics(
        group_id=group_id,
        entities=len(entities),
        layers=layers,
        nodes_per_layer=sizes,
        compression_per_layer=compression,
        mean_children_per_layer=mean_kids,
        coverage=round(coverage, 6),
        multi_parent_rate=round(multi / len(below_top), 6) if below_top and layers else 0.0,
        promoted=sum(1 for c in categories if c.promoted),
        dissolved=dissolved,
        rejected_names=list(rejected_names),
        repairs=dict(repairs or {}),
        reasked_nodes=reasked_nodes,
        llm_calls=llm_calls,
        llm_failures=llm_failures,
        stop_reason=stop_reason,
        discarded_layer_size=discarded_layer_size,
    )


def write_metrics(path: str | Path, metrics: Mapping[str, HierarchyMetrics]) -> Path:
    """Save ``{group_id: metrics}`` as one JSON file; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({g: m.model_dump() for g, m in metrics.items()}, indent=2, sort_keys=True))
    return out
