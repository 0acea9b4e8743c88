"""One memory file, two processes (real subprocesses, scripted LLM): a second writer waits for the first and
every message of both is stored once; with a short lock timeout it fails naming the first writer's pid and
stores nothing; two processes creating a new file at once both succeed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mnemis.store import GraphStore
from mnemis.store.lock import StoreBusy, WriterLock
from tests.helpers import HELPERS

WORKER = HELPERS / "memory_worker.py"
N = 12  # messages per writer


class Worker:
    def __init__(self, delay: float = 0.0) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
        self.proc = subprocess.Popen([sys.executable, str(WORKER), str(delay)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        assert line.strip() == "READY", self.proc.stderr.read()

    def send(self, path: Path, group: str, messages: list[dict], **options: object) -> None:
        self.proc.stdin.write(json.dumps({"path": str(path), "group": group, "messages": messages, **options}) + "\n")
        self.proc.stdin.flush()

    def reply(self) -> str:
        """The next OK / ERR line (BATCH lines skipped)."""
        for line in self.proc.stdout:
            if line.startswith(("OK", "ERR")):
                return line.strip()
        raise AssertionError(f"worker ended: {self.proc.stderr.read()[-2000:]}")

    def wait_batch(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("BATCH"):
                return
            assert not line.startswith(("OK", "ERR")), line
        raise AssertionError(self.proc.stderr.read()[-2000:])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def workers():
    made: list[Worker] = []

    def make(delay: float = 0.0) -> Worker:
        made.append(Worker(delay))
        return made[-1]

    yield make
    for w in made:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait(timeout=30)


def _messages(who: str, n: int = N) -> list[dict]:
    return [{"speaker": who, "text": f"{who} note {i}: Miso met Carla in Denver.", "time": f"2024-05-01T10:{i:02d}"}
            for i in range(n)]


def _texts(path: Path, group: str = "g") -> list[str]:
    with GraphStore(path) as store:
        return [e.content for e in store.episodes(group)]


def test_two_writers_on_one_group_of_a_new_file_both_keep_every_message(tmp_path, workers):
    a, b = workers(), workers()
    for trial in range(4):  # the file is new each time: both processes also create it at once
        path = tmp_path / f"mem{trial}.db"
        a.send(path, "g", _messages("Ann"))
        b.send(path, "g", _messages("Bob"))
        replies = [a.reply(), b.reply()]
        assert all(r.startswith("OK") for r in replies), replies
        texts = _texts(path)
        assert sorted(texts) == sorted(f"{m['speaker']}: {m['text']}" for m in _messages("Ann") + _messages("Bob"))
        with GraphStore(path) as store:
            eps = store.episodes("g")
            assert sorted(e.position for e in eps) == list(range(2 * N))  # one writer after the other
            assert all(len(store.done(s, "g")) == 2 * N for s in ("extract", "resolve", "facts"))
            assert store.get_meta("schema_version") == 1  # one schema, created once
    a.close()
    b.close()


def test_a_second_writer_times_out_naming_the_first_and_stores_nothing(tmp_path, workers):
    slow, other = workers(delay=0.12), workers()  # the slow writer holds the lock ~1.5 s per add
    path = tmp_path / "mem.db"
    for trial in range(2):
        group = f"g{trial}"
        slow.send(path, group, _messages("Ann", 4))
        slow.wait_batch()  # the first writer is inside add, holding the lock
        other.send(path, group, _messages("Bob", 4), lock_timeout=0.3)
        err = other.reply()
        assert err.startswith("ERR StoreBusy") and f"in use by pid {slow.proc.pid}" in err, err
        assert str(path) in err
        assert slow.reply().startswith("OK")
        assert [t.split(":")[0] for t in _texts(path, group)] == ["Ann"] * 4  # nothing of Bob's
        other.send(path, group, _messages("Bob", 4))  # once the first is done, the second gets through
        assert other.reply().startswith("OK")
        assert len(_texts(path, group)) == 8


def test_writer_lock_is_reentrant_and_names_the_holder(tmp_path):
    lock = WriterLock(tmp_path / "m.db.lock", timeout=0)
    other = WriterLock(tmp_path / "m.db.lock", timeout=0.1)  # another open file: flock conflicts like a process
    with lock(), lock():
        assert lock.held and lock.holder() == os.getpid()
        with pytest.raises(StoreBusy, match=re.escape(f"memory {tmp_path / 'm.db'} is in use by pid {os.getpid()}")), other():
            pass
    with other():  # released after the outer exit
        assert other.held
