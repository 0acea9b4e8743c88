"""The retrieval stage as one call: System-1, System-2, fusion and rendering for a batch of questions.

``run_retrieval(store, questions, cfg, ...)`` takes the ``retrieval`` settings
(:class:`mnemis.settings.RetrievalSettings`, from ``conf/retrieval/mnemis.yaml``: ``k``, ``system1``, ``system2``,
``fusion``, ``context``) and the
already-built models, runs every stage once over the whole batch (System-1: one ``search``; System-2:
one ``generate`` per round; fusion: one reranker call; rendering: one store pass per group) and returns
fused contexts, rendered texts, per-route contexts and traversal logs (the run directory's files of a retrieval:
:func:`mnemis.eval.run_dir.retrieval_files`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from mnemis.retrieve.context import RenderedContext, render_context
from mnemis.retrieve.fuse import Fuser
from mnemis.retrieve.system2 import System2, System2Result
from mnemis.settings import RetrievalSettings
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


def run_retrieval(
    store: GraphStore,
    questions: Sequence[Question],
    cfg: RetrievalSettings,
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
        cfg: the retrieval settings (:class:`mnemis.settings.RetrievalSettings`).
        embedder: query encoder for System-1 (ignored when ``system1`` is given).
        llm: the ``LLM`` client for System-2 selection.
        reranker: a ``Reranker`` when ``fusion.scorer`` is ``reranker``.
        system1: a ready :class:`~mnemis.retrieve.system1.System1` (else built from ``cfg.system1``).
        tokenizer: optional token counter for the context budget.
    """
    mode = cfg.fusion.mode
    s1_on = cfg.system1.enabled or mode == "system1"
    s2_on = cfg.system2.enabled and mode in ("system2", "both")
    questions = list(questions)
    order_s2 = s2_on and cfg.fusion.system2_order == "similarity"
    s1 = None
    if (s1_on or order_s2) and system1 is None:
        from mnemis.retrieve.system1 import System1

        system1 = System1(store, embedder, **cfg.system1.kwargs())
    if s1_on:
        s1 = system1.search(questions)
    s2 = None
    if s2_on:
        if llm is None:
            raise ValueError(f"fusion mode {mode!r} needs an llm for System-2 selection")
        s2 = System2(store, llm, cfg.system2.config()).select(questions)
    contexts = Fuser(store, reranker, system1=system1, **cfg.fusion.model_dump()).fuse(questions, s1, s2)
    rendered = render_context(store, contexts, tokenizer=tokenizer, **cfg.context.model_dump())
    return RetrievalOutput(contexts=contexts, rendered=rendered, system1=s1, system2=s2)
