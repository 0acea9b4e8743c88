"""Mnemis as a method of a run (``conf/method/mnemis.yaml``): the :class:`~mnemis.memory.Memory` the build made,
read back by System-1, System-2 and fusion."""

from __future__ import annotations

from collections.abc import Sequence

from mnemis.eval.run_dir import RERANK_CACHE_FILE, retrieval_files
from mnemis.memory import Memory
from mnemis.method import EPISODE_VECTORS, GRAPH, Method, MethodContexts, MethodRun, json_file
from mnemis.types import Question


class MnemisMethod(Method):
    """Retrieval over the built memory (``mnemis build`` made its base graph and hierarchy).

    Hands back the fused contexts, the recall of each route (``<name>/system1``, ``<name>/system2``,
    ``<name>/fused``), the retrieval's files (``contexts.jsonl``, ``system1.jsonl``, ``traversal.jsonl``,
    ``selection_cost.json``) and, when fusion reranks, the reranker cache's counts (``rerank_cache.json``).
    """

    builds = frozenset({EPISODE_VECTORS, GRAPH})

    def prepare(self, run: MethodRun) -> None:
        super().prepare(run)
        self.memory = Memory(run.settings, models=run.models, store=run.store)

    def contexts(self, questions: Sequence[Question]) -> MethodContexts:
        run = self.run
        res = self.memory.retrieve(questions)
        files = retrieval_files(res)
        if run.settings.retrieval.fusion.scorer == "reranker" and hasattr(run.models.reranker, "stats"):
            files[RERANK_CACHE_FILE] = json_file(run.models.reranker.stats.to_dict())
        routes = {f"{self.name}/{route}": ctxs for route, ctxs in res.routes().items()}
        return MethodContexts(res.texts, res.contexts, recall_routes=routes, files=files)
