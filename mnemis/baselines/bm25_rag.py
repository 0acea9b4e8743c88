"""BM25-only RAG (``methods=[bm25_rag]``): the RAG baseline with System-1's BM25 list alone, no embedding model.

The run's System-1 settings (``retrieval.system1``: ``k``, ``bm25_params``, the episode text recipe, query
normalisation) with ``vector: false``: each question's ``k`` episodes are its group's best BM25 matches, in BM25
order, rendered chronologically like RAG's. No embedder is built and no episode vector is read, so it runs on a
memory that stored the episodes only.
"""

from __future__ import annotations

from typing import Any

from mnemis.baselines.rag import RagMethod


class BM25RagMethod(RagMethod):
    """:class:`~mnemis.baselines.rag.RagMethod` searching BM25 only (``conf/method/bm25_rag.yaml``)."""

    builds = frozenset()  # the stored episodes are all it reads

    def system1(self) -> Any:
        return self.run.settings.retrieval.system1.model_copy(update={"bm25": True, "vector": False})

    def embedder(self) -> Any:
        return None
