"""A run SIGKILLed at random points and rerun reproduces the uninterrupted run's graph exactly."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from mnemis.store.sqlite import GraphStore

from .fakes import CONVERSATIONS, graph

WORKER = Path(__file__).with_name("resume_worker.py")
DELAY = 0.05
STAGES = ("extract", "resolve", "facts")


def _start(db: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, str(WORKER), str(db), str(cache), str(DELAY)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert line.strip() == "READY", proc.stderr.read()
    return proc


def _finish(db: Path, cache: Path) -> float:
    """Run to the end; returns the seconds from READY to DONE."""
    proc = _start(db, cache)
    t0 = time.perf_counter()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "DONE" in out, err
    return time.perf_counter() - t0


def _snapshot(db: Path) -> dict:
    with GraphStore(db) as store:
        return {
            "graph": {g: graph(store, g) for g in CONVERSATIONS},
            "stats": store.get_meta("ingest.stats"),
            "progress": {(s, g): sorted(store.done(s, g))
                         for s in (*STAGES, "attributes") for g in CONVERSATIONS},
        }


def _progress(db: Path) -> int:
    if not db.exists():
        return 0
    with GraphStore(db) as store:
        return sum(len(store.done(s, g)) for s in STAGES for g in CONVERSATIONS)


def test_killed_runs_resume_to_the_same_graph(tmp_path):
    ref_db = tmp_path / "ref.db"
    work_s = _finish(ref_db, tmp_path / "ref-cache")
    reference = _snapshot(ref_db)
    total = _progress(ref_db)
    assert reference["graph"]["conv-a"]["counts"]["facts"] > 0
    rng = random.Random(1234)
    partial: set[int] = set()
    for run in range(2):
        db, cache = tmp_path / f"run{run}.db", tmp_path / f"cache{run}"
        for lo, hi in ((0.05, 0.35), (0.3, 0.6), (0.5, 0.9)):  # reruns start later stages: spread the kills
            proc = _start(db, cache)
            time.sleep(rng.uniform(lo, hi) * work_s)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
            done = _progress(db)
            if 0 < done < total:
                partial.add(done)
        _finish(db, cache)
        got = _snapshot(db)
        assert got["graph"] == reference["graph"]
        assert got["stats"] == reference["stats"]
        assert got["progress"] == reference["progress"]
        for g in CONVERSATIONS:  # no duplicate names or facts
            ents = got["graph"][g]["entities"]
            assert len({e["name"].casefold() for e in ents}) == len(ents)
    assert len(partial) >= 2, f"too few distinct partial states ({partial}); resumption not exercised"
