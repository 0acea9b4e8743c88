"""The index cache is written atomically under a lock: processes that rebuild and save the same cache folder at
once never fail, never mix their files, and a later reader finds a complete index."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from mnemis.index.catalog import IndexCatalog
from mnemis.store.sqlite import GraphStore
from mnemis.types import Episode
from tests.helpers import HELPERS

WORKER = HELPERS / "cache_worker.py"
WORDS = ["zebra", "walrus", "pelican"]


def _store(path: Path, word: str, n: int) -> Path:
    with GraphStore(path) as store:
        store.upsert_episodes([Episode(group_id="g1", id=f"g1:{word}{i}", source_id=f"{word}{i}", name=str(i),
                                       speaker="Ann", content=f"Ann: the {word} number {i} sleeps", session=1,
                                       valid_at=datetime(2024, 5, 1, 10, i), turn=i, position=i) for i in range(n)])
    return path


def test_processes_saving_one_index_folder_at_once_never_collide(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    procs = []
    for k, word in enumerate(WORDS):
        db = _store(tmp_path / f"{word}.db", word, 20 + k)
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(db), str(cache), "8", word], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        assert p.stdout.readline().strip() == "READY", p.stderr.read()
    for p in procs:  # all start together
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "DONE" in out, err[-3000:]
    [folder] = [p for p in (cache).rglob("episode-*") if p.is_dir() and not p.name.startswith(".")]
    leftovers = [p.name for p in folder.parent.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")]
    assert leftovers == []  # no temporary or replaced folder left behind
    for word in WORDS:  # whichever process saved last, the folder holds one complete index
        with GraphStore(tmp_path / f"{word}.db", read_only=True) as store:
            index = IndexCatalog(store, cache_dir=cache).get("g1", "episode")
            assert all(i.startswith(f"g1:{word}") for i in index.bm25.search([word], k=3)[1][0])
