"""Hierarchical graph: category layers built over the entities, and their quality metrics."""

from __future__ import annotations

from mnemis.hierarchy.build import BuiltHierarchy, HierarchyConfig, build_hierarchies, category_text, organize
from mnemis.hierarchy.metrics import HierarchyMetrics, compute_metrics, write_metrics

__all__ = [
    "BuiltHierarchy",
    "HierarchyConfig",
    "HierarchyMetrics",
    "build_hierarchies",
    "category_text",
    "compute_metrics",
    "organize",
    "write_metrics",
]
