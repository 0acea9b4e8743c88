"""A run SIGKILLed at random points (counted in backend batches, not seconds) and rerun reproduces the uninterrupted run's graph exactly."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from mnemis.store.sqlite import GraphStore
from tests.helpers import HELPERS
from tests.helpers.ingest import CONVERSATIONS, STAGES, snapshot

WORKER = HELPERS / "resume_worker.py"
DELAY = 0.01


def _start(db: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, str(WORKER), str(db), str(cache), str(DELAY)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert line.strip() == "READY", proc.stderr.read()
    return proc


def _finish(db: Path, cache: Path) -> int:
    """Run to the end; returns how many batches reached the backend."""
    proc = _start(db, cache)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "DONE" in out, err
    return sum(line.startswith("BATCH ") for line in out.splitlines())


def _kill_in_batch(proc: subprocess.Popen, k: int) -> bool:
    """SIGKILL the run while its ``k``-th backend batch is in flight; False if it ended before that batch."""
    seen = 0
    for line in proc.stdout:
        seen += line.startswith("BATCH ")
        if seen == k:
            proc.send_signal(signal.SIGKILL)
            break
    proc.communicate(timeout=30)
    return proc.returncode == -signal.SIGKILL


def _progress(db: Path) -> int:
    if not db.exists():
        return 0
    with GraphStore(db) as store:
        return sum(len(store.done(s, g)) for s in STAGES for g in CONVERSATIONS)


def test_killed_runs_resume_to_the_same_graph(tmp_path):
    ref_db = tmp_path / "ref.db"
    batches = _finish(ref_db, tmp_path / "ref-cache")
    assert batches >= 6, batches
    reference = snapshot(ref_db)
    total = _progress(ref_db)
    assert reference["graph"]["conv-a"]["counts"]["facts"] > 0
    rng = random.Random(1234)
    partial: set[int] = set()
    for run in range(2):
        db, cache = tmp_path / f"run{run}.db", tmp_path / f"cache{run}"
        # A rerun replays finished batches from the cache, so each kill lands further on; kill until it ends.
        for _ in range(12):
            if not _kill_in_batch(_start(db, cache), rng.randint(2, batches // 2)):
                break
            done = _progress(db)
            if 0 < done < total:
                partial.add(done)
        _finish(db, cache)
        got = snapshot(db)
        assert got["graph"] == reference["graph"]
        assert got["stats"] == reference["stats"]
        assert got["progress"] == reference["progress"]
        for g in CONVERSATIONS:  # no duplicate names or facts
            ents = got["graph"][g]["entities"]
            assert len({e["name"].casefold() for e in ents}) == len(ents)
    assert len(partial) >= 2, f"too few distinct partial states ({partial}); resumption not exercised"
