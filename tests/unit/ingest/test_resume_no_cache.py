"""kill -9 at random batches, then rerun with NO response cache: the chunks committed before a kill are not
redone (calls of all runs <= an uninterrupted run + one chunk of work per kill) and the graph is the same."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import HELPERS
from tests.helpers.ingest import CONVERSATIONS, snapshot

WORKER = HELPERS / "resume_worker.py"

CHUNK = 2
# one chunk of extraction work = entities, entity reflection, facts, fact reflection over CHUNK episodes
CHUNK_WORK = 4 * CHUNK


def _run(db: Path, kill_after: int | None = None) -> tuple[int, int, bool]:
    """Requests and batches of one worker run (SIGKILLed once ``kill_after`` batches began), and whether it finished."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, str(WORKER), str(db), "none", "0.02", str(CHUNK)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    calls = batches = 0
    done = False
    for line in proc.stdout:
        if line.startswith("BATCH "):
            calls += int(line.split()[1])
            batches += 1
            if kill_after is not None and batches >= kill_after:
                proc.send_signal(signal.SIGKILL)
                break
        done = done or line.strip() == "DONE"
    _, err = proc.communicate(timeout=60)
    assert kill_after is not None or (proc.returncode == 0 and done), err
    return calls, batches, done


def test_sigkilled_build_resumes_without_cache(tmp_path):
    ref_calls, ref_batches, _ = _run(tmp_path / "ref.db")
    reference = snapshot(tmp_path / "ref.db")
    assert reference["graph"]["conv-a"]["counts"]["facts"] > 0
    rng = random.Random(7)
    db, total, kills = tmp_path / "killed.db", 0, 0
    for _ in range(3):  # each rerun starts where the last stopped: kill it somewhere in its first half
        calls, _, finished = _run(db, kill_after=rng.randint(2, ref_batches // 2))
        total += calls
        kills += not finished
    last, _, _ = _run(db)
    total += last
    assert kills >= 2
    assert last < ref_calls, "the last rerun started over"
    assert total <= ref_calls + kills * CHUNK_WORK, (total, ref_calls, kills)
    got = snapshot(db)
    assert got["graph"] == reference["graph"] and got["progress"] == reference["progress"]
    assert got["stats"] == reference["stats"]
    assert set(got["graph"]) == set(CONVERSATIONS)
