"""Build the base graph of one shard with the scripted LLM: the unit of work of the scale benchmark and tests.

``python -m mnemis.testing.runner DATA SHARD STORE CACHE_DIR OUT_JSON [DELAY_S]`` ingests the groups of
``SHARD`` (``i/N``) of the LongMemEval file ``DATA`` into the store ``STORE``, with the response cache in
``CACHE_DIR`` (shared by all shards; ``none`` = no cache, i.e. no reuse) and writes the ledger, timings and
peak memory to ``OUT_JSON``. ``DELAY_S`` sleeps before each backend batch and, when set, prints ``BATCH n`` after the n-th batch reaches
the backend, so a test can kill the run at a chosen point of the work rather than at a guessed time.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from mnemis.data.longmemeval import load_longmemeval
from mnemis.ingest.pipeline import BaseGraphBuilder
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.base import Completion, LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.testing.responder import base_graph_responder
from mnemis.data.shard import restrict_dataset
from mnemis.store.sqlite import GraphStore


class LeanScriptedBackend(ScriptedBackend):
    """``ScriptedBackend`` that keeps no request history (long runs) and can sleep per batch.

    ``hierarchy``: categorisation prompts get grouping replies (``hierarchy_responder``), so a whole
    ``mnemis run`` builds a real hierarchy. ``beacon_dir``: after each batch the backend writes
    ``<beacon_dir>/<pid>`` (``<batches> <requests>``), so a benchmark can kill a worker at a known point of its
    work (``conf/llm/scripted_scale.yaml``).
    """

    def __init__(self, delay_s: float = 0.0, model_id: str = "scripted-scale", announce: bool = False, *,
                 hierarchy: bool = False, beacon_dir: str | None = None) -> None:
        from mnemis.testing.hierarchy_rules import hierarchy_responder

        super().__init__(hierarchy_responder if hierarchy else base_graph_responder, model_id=model_id)
        self.delay_s = delay_s
        self.announce = announce
        self.beacon_dir = Path(beacon_dir) if beacon_dir else None
        self.n_batches = 0
        self.n_requests = 0

    def complete(self, requests: list[LLMRequest]) -> list[Completion]:  # type: ignore[override]
        if self.delay_s:
            time.sleep(self.delay_s)
        out = super().complete(requests)
        self.batches.clear()
        self.n_batches += 1
        self.n_requests += len(requests)
        if self.announce:
            print(f"BATCH {self.n_batches}", flush=True)
        if self.beacon_dir is not None:
            import os

            self.beacon_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.beacon_dir / f".{os.getpid()}.tmp"
            tmp.write_text(f"{self.n_batches} {self.n_requests}\n")
            tmp.replace(self.beacon_dir / str(os.getpid()))
        return out


def peak_rss_mb() -> float:
    """Peak resident memory of this process (``ru_maxrss``, KiB on Linux) in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    """User + system CPU seconds of this process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_shard(data: str | Path, shard: str | None, store_path: str | Path, cache_dir: str | Path | None, *,
              delay_s: float = 0.0, context_window: int = 3, context_scope: str = "group",
              embed_dim: int = 64) -> dict[str, Any]:
    """Ingest one shard's groups (base graph); returns ledger, build stats, wall time and peak memory."""
    t0 = time.perf_counter()
    ds = restrict_dataset(load_longmemeval(data), shard)
    backend = LeanScriptedBackend(delay_s, announce=delay_s > 0)
    llm = LLM(backend, cache_dir=cache_dir, cache_mode="readwrite" if cache_dir else "off",
              max_retries=1)
    with GraphStore(store_path) as store:
        builder = BaseGraphBuilder(store, llm, HashingEmbedder(embed_dim), context_window=context_window,
                                   context_scope=context_scope,
                                   show_progress=False)
        stats = builder.ingest(ds.episodes)
        counts = {g: store.counts(g) for g in ds.groups}
    wall = time.perf_counter() - t0
    return {"shard": shard, "groups": len(ds.groups), "episodes": len(ds.episodes), "wall_s": wall,
            "wall_s_per_group": wall / max(len(ds.groups), 1), "cpu_s": cpu_s(), "peak_rss_mb": peak_rss_mb(),
            "backend_batches": backend.n_batches, "ledger": llm.ledger.to_dict(), "stats": stats.to_dict(), "counts": counts}


def main(argv: list[str]) -> None:
    data, shard, store, cache, out = argv[:5]
    delay = float(argv[5]) if len(argv) > 5 else 0.0
    scope = argv[6] if len(argv) > 6 else "group"
    print("READY", flush=True)
    res = run_shard(data, None if shard == "all" else shard, store, None if cache == "none" else cache,
                    delay_s=delay, context_scope=scope)
    Path(out).write_text(json.dumps(res, indent=1, default=str))
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
