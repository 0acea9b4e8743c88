"""``ingest.builder``: which code builds the base graph. ``mnemis`` (ours, batched:
:class:`~mnemis.ingest.pipeline.BaseGraphBuilder`, every other ``ingest`` key) or ``graphiti`` (graphiti-core
itself, imported into our store: :class:`~mnemis.ingest.graphiti.builder.GraphitiGraphBuilder`, the keys under
``ingest.graphiti``). Both take the store, the LLM and the embedder and offer ``ingest(episodes)``."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from mnemis.ingest.pipeline import BaseGraphBuilder

BUILDERS = ("mnemis", "graphiti")


def make_builder(store: Any, llm: Any, embedder: Any, *, builder: str = "mnemis",
                 graphiti: Mapping[str, Any] | None = None, **ours: Any) -> Any:
    """The configured base-graph builder (``ingest`` node: ``builder``, ``graphiti`` and our builder's keys)."""
    if builder == "mnemis":
        return BaseGraphBuilder(store, llm, embedder, **ours)
    if builder == "graphiti":
        from mnemis.ingest.graphiti.builder import GraphitiGraphBuilder

        BaseGraphBuilder(store, llm, embedder, **ours)  # our keys are still checked (the ablation reads them)
        kwargs = dict(graphiti or {})
        known = set(inspect.signature(GraphitiGraphBuilder.__init__).parameters) - {"self", "store", "llm", "embedder"}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(f"ingest.graphiti: unknown keys {unknown}; known: {sorted(known)}")
        if "embed_kinds" in ours:
            kwargs.setdefault("embed_kinds", ours["embed_kinds"])
        return GraphitiGraphBuilder(store, llm, embedder, **kwargs)
    raise ValueError(f"ingest.builder must be one of {BUILDERS}, got {builder!r}")


def _signature() -> inspect.Signature:
    """``make_builder``'s keys as the config checker sees them: ours, ``builder`` and ``graphiti``."""
    own = [p for p in inspect.signature(make_builder).parameters.values() if p.kind is not p.VAR_KEYWORD]
    theirs = [p for name, p in inspect.signature(BaseGraphBuilder.__init__).parameters.items()
              if p.kind is p.KEYWORD_ONLY]
    return inspect.Signature([*own, *theirs])


make_builder.__signature__ = _signature()  # type: ignore[attr-defined]
