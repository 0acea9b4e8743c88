"""The retrieval stage as one call: System-1, System-2, fusion and rendering for a batch of questions.

``run_retrieval(store, questions, cfg, ...)`` takes the plain ``retrieval`` config dict
(``conf/retrieval/mnemis.yaml``: ``k``, ``system1``, ``system2``, ``fusion``, ``context``) and the
already-built models, runs every stage once over the whole batch (System-1: one ``search``; System-2:
one ``generate`` per round; fusion: one reranker call; rendering: one store pass per group) and returns
fused contexts, rendered texts, per-route contexts and traversal logs (the run directory's files of a retrieval:
:func:`mnemis.eval.run_dir.retrieval_files`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from mnemis.retrieve.context import RenderedContext, render_context
from mnemis.retrieve.fuse import Fuser
from mnemis.retrieve.system2 import System2, System2Result
from mnemis.store.sqlite import GraphStore
from mnemis.types import Question, RetrievedContext


class RetrievalOutput(BaseModel):
    contexts: list[RetrievedContext] = Field(description="fused, cut to k / 2k / 2k")
    rendered: list[RenderedContext]
    system1: list[RetrievedContext] | None = None
    system2: list[System2Result] | None = None

    @property
    def texts(self) -> list[str]:
        return [r.text for r in self.rendered]

    def routes(self) -> dict[str, list[RetrievedContext]]:
        """Per-route contexts for :func:`mnemis.eval.route_recall.route_recall`."""
        out: dict[str, list[RetrievedContext]] = {}
        if self.system1 is not None:
            out["system1"] = self.system1
        if self.system2 is not None:
            out["system2"] = [r.context for r in self.system2]
        out["fused"] = self.contexts
        return out


def _kwargs(node: Mapping[str, Any] | None) -> tuple[bool, dict[str, Any]]:
    node = dict(node or {})
    return bool(node.pop("enabled", True)), node


def run_retrieval(
    store: GraphStore,
    questions: Sequence[Question],
    cfg: Mapping[str, Any],
    *,
    embedder=None,
    llm=None,
    reranker=None,
    system1=None,
    tokenizer=None,
) -> RetrievalOutput:
    """Retrieve, fuse and render for every question (same order).

    Args:
        store: the built memory.
        questions: the batch (any groups).
        cfg: the retrieval settings (:class:`mnemis.settings.RetrievalSettings`, or its plain dict).
        embedder: query encoder for System-1 (ignored when ``system1`` is given).
        llm: the ``LLM`` client for System-2 selection.
        reranker: a ``Reranker`` when ``fusion.scorer`` is ``reranker``.
        system1: a ready :class:`~mnemis.retrieve.system1.System1` (else built from ``cfg["system1"]``).
        tokenizer: optional token counter for the context budget.
    """
    if not isinstance(cfg, Mapping):  # typed settings (mnemis.settings.RetrievalSettings)
        cfg = cfg.model_dump()
    fusion = dict(cfg.get("fusion") or {})
    mode = fusion.get("mode", "both")
    s1_on, s1_kw = _kwargs(cfg.get("system1"))
    s2_on, s2_kw = _kwargs(cfg.get("system2"))
    s1_on = s1_on or mode == "system1"
    s2_on = s2_on and mode in ("system2", "both")
    questions = list(questions)
    s1 = None
    if s1_on:
        if system1 is None:
            from mnemis.retrieve.system1 import System1

            system1 = System1(store, embedder, **s1_kw)
        s1 = system1.search(questions)
    s2 = None
    if s2_on:
        if llm is None:
            raise ValueError(f"fusion mode {mode!r} needs an llm for System-2 selection")
        s2 = System2(store, llm, s2_kw).select(questions)
    contexts = Fuser(store, reranker, **fusion).fuse(questions, s1, s2)
    rendered = render_context(store, contexts, tokenizer=tokenizer, **dict(cfg.get("context") or {}))
    return RetrievalOutput(contexts=contexts, rendered=rendered, system1=s1, system2=s2)
