"""Ingest the fake slice into a file-backed store (run as a subprocess by tests/unit/ingest/test_resume*.py).

Usage: python resume_worker.py DB CACHE_DIR DELAY_S [CHUNK_SIZE]. Prints READY once imports are done,
``BATCH <n requests>`` when a backend batch starts and DONE at the end; the parent SIGKILLs it anywhere in
between. Each backend batch sleeps DELAY_S so the kill points spread over every stage. CACHE_DIR ``none``
runs without the response cache.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if not __package__:  # run as a file (python tests/helpers/resume_worker.py): make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mnemis.ingest.pipeline import BaseGraphBuilder
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.store.sqlite import GraphStore
from tests.helpers.ingest import rule_responder, slice_episodes


class SlowBackend(ScriptedBackend):
    def __init__(self, delay: float) -> None:
        super().__init__(rule_responder)
        self.delay = delay

    def complete(self, requests):
        print(f"BATCH {len(requests)}", flush=True)
        time.sleep(self.delay)
        return super().complete(requests)


def main() -> None:
    db, cache, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    chunk = int(sys.argv[4]) if len(sys.argv) > 4 else 1024
    store = GraphStore(db)
    llm = LLM(SlowBackend(delay), cache_dir=None if cache == "none" else cache, chunk_size=chunk)
    builder = BaseGraphBuilder(store, llm, HashingEmbedder(64), show_progress=False)
    print("READY", flush=True)
    builder.ingest(slice_episodes())
    store.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
