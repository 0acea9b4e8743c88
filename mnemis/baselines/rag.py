"""RAG baseline: System-1 over episodes only (``routes="rag"``), hits rendered like the full-context baseline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mnemis.method import EPISODE_VECTORS, Method, MethodContexts
from mnemis.render import render_episodes
from mnemis.types import Question, RetrievedContext


def render_episode_hits(store: Any, contexts: Sequence[RetrievedContext]) -> list[str]:
    """Each context's episode hits fetched from ``store`` and rendered chronologically (one string each)."""
    out = []
    for ctx in contexts:
        ids = [h.id for h in ctx.episodes]
        episodes = store.episodes(ctx.group_id, ids) if ids else []
        out.append(render_episodes(episodes))
    return out


def rag_contexts(
    store: Any, embedder: Any, questions: Sequence[Question], system1: Any = None, *, k: int | None = None,
    **system1_kwargs: Any,
) -> tuple[list[str], list[RetrievedContext]]:
    """Retrieve ``k`` episodes per question with System-1 (episodes only) and render them.

    ``system1``: the run's System-1 settings (:class:`mnemis.settings.System1Settings`: the same searcher the
    Mnemis route uses, restricted to episodes), else plain keywords of
    :class:`~mnemis.retrieve.system1.System1`. Returns the rendered contexts and the raw
    :class:`RetrievedContext` s (for recall and records).
    """
    from mnemis.retrieve.system1 import System1

    kw = system1.kwargs() if system1 is not None else dict(system1_kwargs)
    if k is not None:
        kw["k"] = k
    kw["routes"] = "rag"
    searcher = System1(store, embedder, **kw)
    retrieved = searcher.search(list(questions))
    return render_episode_hits(store, retrieved), retrieved


class RagMethod(Method):
    """``rag`` (``conf/method/rag.yaml``): :func:`rag_contexts` with the run's System-1 settings and embedder; its
    hits' evidence recall is reported under the method's name."""

    builds = frozenset({EPISODE_VECTORS})

    def system1(self) -> Any:
        """The System-1 settings this method searches with (the run's)."""
        return self.run.settings.retrieval.system1

    def embedder(self) -> Any:
        return self.run.models.embedder

    def contexts(self, questions: Sequence[Question]) -> MethodContexts:
        texts, retrieved = rag_contexts(self.run.store, self.embedder(), questions, self.system1())
        return MethodContexts(texts, retrieved, recall_routes={self.name: retrieved})
