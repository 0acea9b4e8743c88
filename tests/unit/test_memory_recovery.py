"""``Memory.add`` SIGKILLed at a random point (counted in LLM batches), then repeated or recovered: each message
is stored once and ends fully processed (extracted, resolved, summarised, embedded), with the same graph as an
uninterrupted add (scripted LLM, hashing embedder, real subprocesses)."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from mnemis.components import GivenModels
from mnemis.config import compose
from mnemis.memory import QUEUED, Memory
from mnemis.models.embed import HashingEmbedder
from mnemis.testing.responder import scripted_llm
from tests.helpers import HELPERS

WORKER = HELPERS / "memory_worker.py"
MESSAGES = [  # some with times, some without (their identity does not depend on "now")
    {"speaker": "Alice", "text": "I adopted a cat named Miso in Boston.", "time": "2024-05-01T10:00"},
    {"speaker": "Bob", "text": "Miso sounds lovely! Did Carla help you?"},
    {"speaker": "Alice", "text": "Yes, Carla drove us from Denver.", "time": "2024-05-01T10:02"},
    {"speaker": "Bob", "text": "Dana and Eric visited Lisbon with Carla."},
    {"speaker": "Alice", "text": "Miso sleeps next to Frank every night.", "time": "2024-05-02T08:00"},
    {"speaker": "Bob", "text": "Frank moved to Oslo.", "time": "2024-05-02T08:05"},
]


def _memory(path: Path) -> tuple[Memory, object]:
    llm = scripted_llm()
    return Memory(compose(["experiment=quickstart"]), path=path, models=GivenModels(llm, HashingEmbedder(64))), llm


def _calls(llm) -> int:
    return sum(v["calls"] for v in llm.ledger.to_dict()["stages"].values())


def _graph(mem: Memory, g: str = "chat") -> dict:
    store = mem.store
    return {"episodes": sorted(e.content for e in store.episodes(g)),
            "entities": sorted((e.name, e.summary) for e in store.entities(g)),
            "facts": sorted((f.fact, f.invalid_at is None) for f in store.facts(g)),
            "mentions": len(store.mentions(g))}


def _complete(mem: Memory, g: str = "chat") -> None:
    """Every message stored once, through every stage, every entity summarised, everything embedded."""
    store = mem.store
    eps = store.episodes(g)
    assert len(eps) == len(MESSAGES) and len({e.content for e in eps}) == len(MESSAGES)
    assert sorted(e.position for e in eps) == list(range(len(MESSAGES)))
    assert mem.unfinished() == {}
    for stage in ("extract", "resolve", "facts"):
        assert store.done(stage, g) >= {e.id for e in eps}, stage
    mentioned = {m.entity_id for m in store.mentions(g)}
    assert mentioned and all(e.summary for e in store.entities(g) if e.id in mentioned)
    for kind, items in (("episode", eps), ("fact", store.facts(g)), ("entity_summary", store.entities(g))):
        assert store.embedded_ids(g, kind) >= {i.id for i in items}, kind


def _start() -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen([sys.executable, str(WORKER), "0.05"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _run_and_kill(proc: subprocess.Popen, path: Path, batch: int) -> bool:
    """Start an add of MESSAGES in a worker and SIGKILL it as soon as its ``batch``-th LLM batch has returned
    (anywhere in that batch's commit or the next batch's wait); False if the add finished first."""
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
    proc.stdin.write(json.dumps({"path": str(path), "group": "chat", "messages": MESSAGES}) + "\n")
    proc.stdin.flush()
    seen = 0
    for line in proc.stdout:
        assert not line.startswith("ERR"), line
        seen += line.startswith("BATCH")
        if seen == batch or line.startswith("OK"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    return seen == batch


def test_a_killed_add_is_finished_by_repeating_it_or_by_recover(tmp_path, caplog):
    workers = [_start() for _ in range(3)]  # started together: their imports overlap the reference run
    ref, ref_llm = _memory(tmp_path / "ref.db")
    with ref:
        ref.add("chat", MESSAGES)
        reference = _graph(ref)
        _complete(ref)
    batches = sum(v["batches"] for v in ref_llm.ledger.to_dict()["stages"].values())
    assert batches >= 8, batches
    rng = random.Random(27)
    # two random points, and one after the last resolution batch: the kill lands in the summaries
    points = [rng.randint(1, batches - 2), rng.randint(1, batches - 2), batches - 1]
    for trial, point in enumerate(points):
        path = tmp_path / f"run{trial}.db"
        assert _run_and_kill(workers[trial], path, point)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mnemis.memory"):
            mem, llm = _memory(path)
        with mem:
            left = mem.unfinished()
            assert list(left) == ["chat"] and "Memory.recover()" in caplog.text  # the reopened memory says so
            if trial >= 1:  # recover(), then a repeat that finds nothing to do
                mem.recover()
                _complete(mem)
                calls = _calls(llm)
                again = mem.add("chat", MESSAGES)  # a repeat after recovery: nothing new, nothing to extract
                assert again.counters["add.repeated"] == len(MESSAGES) and again.counters["add.new"] == 0
                assert _calls(llm) == calls
            else:
                stats = mem.add("chat", MESSAGES)  # the same add again
                assert stats.counters["add.new"] == 0 and stats.counters["add.repeated"] == len(MESSAGES)
            _complete(mem)
            assert _graph(mem) == reference


def test_recover_on_a_finished_memory_calls_no_llm_and_leaves_stored_only_episodes_alone(tmp_path):
    mem, llm = _memory(tmp_path / "m.db")
    with mem:
        mem.add("chat", MESSAGES[:2])
        before = _graph(mem)
        calls = _calls(llm)
        from mnemis.types import Episode

        ep = mem.store.episodes("chat")[0]
        kept = ep.model_copy(update={"group_id": "raw", "id": Episode.make_id("raw", ep.source_id)})
        mem.store_episodes([kept])  # kept for the baselines only: not a half-processed message
        mem.recover()
        assert _calls(llm) == calls
        assert _graph(mem) == before and mem.store.done("extract", "raw") == set()
        assert mem.store.done(QUEUED, "chat") == {e.id for e in mem.store.episodes("chat")}
