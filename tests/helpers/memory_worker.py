"""A process that adds messages to a ``Memory`` file on command (run by tests/unit/store/test_concurrency.py
and tests/unit/test_memory_recovery.py; scripted LLM, hashing embedder, no model).

Usage: python memory_worker.py [DELAY_S]. Prints READY once imports are done, then reads one JSON command
per stdin line, ``{"path": ..., "group": ..., "messages": [...]}`` (optionally ``"lock_timeout": s``), and
answers ``OK <stats counters as JSON>`` or ``ERR <type>: <message>``. Each LLM backend batch sleeps DELAY_S and
prints ``BATCH <n>`` (so a parent can kill it, or start a second writer, in the middle of an add).
"""

from __future__ import annotations

import json
import sys

from mnemis.components import GivenModels
from mnemis.config import compose
from mnemis.memory import Memory
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.testing.runner import LeanScriptedBackend


def main() -> None:
    delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    cfg = compose(["experiment=quickstart"])
    backend = LeanScriptedBackend(delay, announce=True)  # prints BATCH n as each batch returns
    models = GivenModels(LLM(backend, cache_dir=None, cache_mode="off", max_retries=1), HashingEmbedder(64))
    print("READY", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            options = {"lock_timeout": job["lock_timeout"]} if "lock_timeout" in job else {}
            with Memory(cfg, path=job["path"], models=models, **options) as mem:
                stats = mem.add(job["group"], job["messages"])
            print("OK " + json.dumps(dict(stats.counters)), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            print(f"ERR {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)


if __name__ == "__main__":
    main()
