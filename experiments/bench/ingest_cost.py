"""Build the base graph of a LoCoMo slice with a real model and report prompt tokens per episode per stage.

The cost measurement of the README (``test_base_graph_cpu.py`` imports its helpers)::

    HF_HUB_OFFLINE=1 python experiments/bench/ingest_cost.py --sessions 1 2

writes ``experiments/results/ingest_cost.json``. Defaults: SmolLM2-135M through vLLM on CPU
(``gpu_memory_utilization=0.15``, eager mode), MiniLM embeddings, no response cache (so the ledger counts
every token the model really read). A 135M model extracts few facts, so the later stages (resolution,
fact dedup) read short lists: the figure is a lower bound of what a capable model costs per episode.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.testing.ingest_cost import cost_report
from mnemis.types import Episode


def locomo_slice(group: str = "conv-26", sessions: Sequence[int] = (1,), max_turns: int | None = None,
                 path: str | None = None) -> list[Episode]:
    """Episodes of ``group`` in the given sessions, in order, optionally the first ``max_turns`` only."""
    from mnemis.data.locomo import load_locomo

    ds = load_locomo(path)
    eps = [e for e in ds.episodes_of(group) if e.session in set(sessions)]
    eps.sort(key=lambda e: e.position)
    return eps[:max_turns] if max_turns else eps


def build(episodes: Sequence[Episode], db: Path, backend: Any, embedder: Any, *,
          cache_dir: Path | None = None, max_retries: int = 1, reply_budget: str = "raise",
          **knobs: Any) -> tuple[Any, Any, Any]:
    """Ingest ``episodes`` into a new store at ``db``; returns ``(store, stats, ledger)``.

    ``reply_budget``: the client's policy for budgets below a reply schema's worst case (``fit`` keeps the
    configured budgets and shrinks the schemas, as the CPU quickstart does for a model that pads its replies)."""
    from mnemis.ingest.pipeline import BaseGraphBuilder
    from mnemis.models.llm.client import LLM
    from mnemis.store.sqlite import GraphStore

    store = GraphStore(db)
    llm = LLM(backend, cache_dir=cache_dir, max_retries=max_retries, reply_budget=reply_budget)
    stats = BaseGraphBuilder(store, llm, embedder, **knobs).ingest(episodes)
    return store, stats, llm.ledger


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", default="conv-26")
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--turns", type=int, default=None, help="only the first N turns of the slice")
    ap.add_argument("--workdir", default="runs/ingest-cost")
    ap.add_argument("--out", default="experiments/results/ingest_cost.json", help="JSON written here ('' = none)")
    args = ap.parse_args()

    from mnemis.models.embed import SentenceTransformerEmbedder
    from mnemis.models.llm.vllm_backend import VLLMBackend

    eps = locomo_slice(args.group, args.sessions, args.turns)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    db = work / f"memory-{int(time.time())}.sqlite"
    t0 = time.perf_counter()
    backend = VLLMBackend("smollm2-135m", gpu_memory_utilization=0.15, max_model_len=4096, enforce_eager=True)
    t_engine = time.perf_counter() - t0
    store, stats, ledger = build(eps, db, backend, SentenceTransformerEmbedder("minilm", device="cpu"))
    report = cost_report(ledger, len(eps))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or None
    report.update({"measured": "prompt/completion tokens per episode and per stage of one uncached base-graph "
                               "build (ledger of the LLM client)", "model": backend.model_id, "commit": commit,
                   "slice": {"group": args.group, "sessions": args.sessions, "turns": len(eps)},
                   "engine_start_s": round(t_engine, 1),
                   "build_s": round(time.perf_counter() - t0 - t_engine, 1),
                   "counts": store.counts(args.group), "build_stats": stats.to_dict()["counters"],
                   "load_avg_after": [round(x, 1) for x in os.getloadavg()]})
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    backend.close()


if __name__ == "__main__":
    main()
