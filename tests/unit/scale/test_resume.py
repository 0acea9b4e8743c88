"""A shard SIGKILLed mid-run and rerun (same store, same cache) ends with the uninterrupted run's graph."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from mnemis.testing.synth import SynthSpec, write_lme
from mnemis.store.sqlite import GraphStore

SPEC = SynthSpec(groups=4, sessions_per_haystack=3, pool_size=3, overlap=0.5, turns_per_session=4, words_per_turn=4)
DELAY = 0.02  # seconds per backend batch; a delay also makes the runner print "BATCH n" after each batch


def _start(data: Path, db: Path, cache: Path, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "mnemis.testing.runner", str(data), "1/2", str(db), str(cache),
                             str(out), str(DELAY)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
    return proc


def _finish(data: Path, db: Path, cache: Path, out: Path) -> None:
    proc = _start(data, db, cache, out)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "DONE" in stdout, stderr[-3000:]


def _kill_after(proc: subprocess.Popen, batches: int) -> None:
    """SIGKILL the run as soon as its ``batches``-th uncached batch has reached the backend."""
    for line in proc.stdout:
        assert line.strip() != "DONE", f"the run finished before batch {batches}"
        if line.strip() == f"BATCH {batches}":
            proc.send_signal(signal.SIGKILL)
            break
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.returncode


def _snapshot(db: Path) -> dict:
    with GraphStore(db) as store:
        return {g: {"entities": [e.model_dump() for e in store.entities(g)],
                    "facts": [f.model_dump() for f in store.facts(g)],
                    "mentions": sorted((m.episode_id, m.entity_id) for m in store.mentions(g)),
                    "counts": store.counts(g)} for g in sorted(store.groups())}


def test_killed_shard_resumes_to_the_same_graph(tmp_path):
    data = write_lme(SPEC, tmp_path / "lme.json")
    _finish(data, tmp_path / "ref.db", tmp_path / "ref-cache", tmp_path / "ref.json")
    reference = _snapshot(tmp_path / "ref.db")
    assert reference and all(v["counts"]["facts"] > 0 for v in reference.values())
    total = json.loads((tmp_path / "ref.json").read_text())["backend_batches"]
    assert total >= 6, total
    db, cache = tmp_path / "run.db", tmp_path / "cache"
    # Kill points counted in batches that reach the backend (cache hits do not): the first run does 30% of the
    # work, the second (which replays the first from the cache) another 35%; neither depends on machine speed.
    for batches in (max(1, total * 3 // 10), max(1, total * 35 // 100)):
        proc = _start(data, db, cache, tmp_path / "run.json")
        _kill_after(proc, batches)
        assert not (tmp_path / "run.json").exists()  # it never got to the end
    assert db.exists() and _snapshot(db) != reference  # something was done, not everything
    _finish(data, db, cache, tmp_path / "run.json")
    assert _snapshot(db) == reference
    res = json.loads((tmp_path / "run.json").read_text())
    assert res["ledger"]["total"]["cache_hits"] > 0 or res["ledger"]["total"]["calls"] < json.loads(
        (tmp_path / "ref.json").read_text())["ledger"]["total"]["calls"]  # the rerun did not start over
