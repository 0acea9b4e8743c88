"""A shard SIGKILLed mid-run and rerun (same store, same cache) ends with the uninterrupted run's graph."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from mnemis.scale.synth import SynthSpec, write_lme
from mnemis.store.sqlite import GraphStore

SPEC = SynthSpec(groups=4, sessions_per_haystack=3, pool_size=3, overlap=0.5, turns_per_session=4, words_per_turn=4)
DELAY = 0.08  # seconds per backend batch: spreads the kill points over the stages


def _start(data: Path, db: Path, cache: Path, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "mnemis.scale.runner", str(data), "1/2", str(db), str(cache),
                             str(out), str(DELAY)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
    return proc


def _finish(data: Path, db: Path, cache: Path, out: Path) -> float:
    proc = _start(data, db, cache, out)
    t0 = time.perf_counter()
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "DONE" in stdout, stderr[-3000:]
    return time.perf_counter() - t0


def _snapshot(db: Path) -> dict:
    with GraphStore(db) as store:
        return {g: {"entities": [e.model_dump() for e in store.entities(g)],
                    "facts": [f.model_dump() for f in store.facts(g)],
                    "mentions": sorted((m.episode_id, m.entity_id) for m in store.mentions(g)),
                    "counts": store.counts(g)} for g in sorted(store.groups())}


def test_killed_shard_resumes_to_the_same_graph(tmp_path):
    data = write_lme(SPEC, tmp_path / "lme.json")
    work_s = _finish(data, tmp_path / "ref.db", tmp_path / "ref-cache", tmp_path / "ref.json")
    reference = _snapshot(tmp_path / "ref.db")
    assert reference and all(v["counts"]["facts"] > 0 for v in reference.values())
    db, cache = tmp_path / "run.db", tmp_path / "cache"
    killed = 0
    for frac in (0.3, 0.65):
        proc = _start(data, db, cache, tmp_path / "run.json")
        time.sleep(frac * work_s)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.communicate(timeout=30)
        assert not (tmp_path / "run.json").exists()  # it never got to the end
    assert killed == 2
    assert db.exists() and _snapshot(db) != reference  # something was done, not everything
    _finish(data, db, cache, tmp_path / "run.json")
    assert _snapshot(db) == reference
    res = json.loads((tmp_path / "run.json").read_text())
    assert res["ledger"]["total"]["cache_hits"] > 0 or res["ledger"]["total"]["calls"] < json.loads(
        (tmp_path / "ref.json").read_text())["ledger"]["total"]["calls"]  # the rerun did not start over
