"""``python -m mnemis.baselines.peers.worker JOB_JSON RESULT_JSON``: one peer library run in its own process.

``JOB_JSON`` (written by :func:`mnemis.baselines.peers.common.run_peer`) holds the method, the dataset slice,
the questions, the ``peers`` settings, the endpoint, and the embedder / reranker config nodes, which are built
here. ``RESULT_JSON`` gets the contexts, the per-question failures and the statistics.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from mnemis.settings import PeersSettings, instantiate
    from mnemis.types import Dataset, Question

    job = json.loads(Path(argv[0]).read_text())
    data = Dataset.model_validate(job["data"])
    questions = [Question.model_validate(q) for q in job["questions"]]
    embedder = instantiate(job["embedder"])
    reranker = instantiate(job["reranker"]) if job.get("reranker") else None
    if isinstance(reranker, functools.partial):  # rerankers that need the embedder (e.g. cosine)
        reranker = reranker(embedder=embedder)
    if job["method"] == "graphiti":
        from mnemis.baselines.peers.graphiti_peer import run_graphiti as run
    else:
        from mnemis.baselines.peers.mem0_peer import run_mem0_oss as run
    out = run(data, questions, PeersSettings.model_validate(job["peers"]), job["base_url"], job["model"], embedder, reranker, Path(job["work"]))
    Path(argv[1]).write_text(json.dumps({"contexts": out.contexts, "stats": out.stats,
                                         "question_failures": out.question_failures}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
