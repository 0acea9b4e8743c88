"""Stage progress (counts, rate, ETA; plain lines off a TTY), the JSONL tracker and tracker naming."""

from __future__ import annotations

import json

from mnemis import progress
from mnemis.eval.tracking import JsonlTracker, log_ledger, make_tracker, watch_progress
from mnemis.models.ledger import Ledger
from mnemis.settings import JsonlTrackerSettings, WandbTrackerSettings


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_plain_lines_every_few_percent_with_rate_and_eta():
    clock, lines = Clock(), []
    with progress.Progress("extract_facts", 200, tty=False, every_pct=10, every_s=1e9, clock=clock,
                           emit=lines.append) as p:
        for _ in range(200):
            clock.t += 0.5
            p.update(1)
    assert len(lines) == 10  # one line per 10 %, the last at 100 %
    assert lines[4] == "extract_facts 100/200 (50%) 2.0/s ETA 0:00:50"
    assert lines[-1].startswith("extract_facts 200/200 (100%)") and lines[-1].endswith("ETA 0:00:00")


def test_a_fast_stage_prints_only_its_last_line():
    clock, lines = Clock(), []
    with progress.Progress("resolve facts", 18, tty=False, clock=clock, emit=lines.append) as p:
        for _ in range(18):
            clock.t += 0.05
            p.update(1)
    assert lines == ["resolve facts 18/18 (100%) 20.0/s ETA 0:00:00"]


def test_a_line_every_interval_even_when_slow():
    clock, lines = Clock(), []
    p = progress.Progress("answer", 10_000, tty=False, every_pct=50, every_s=60, clock=clock, emit=lines.append)
    for _ in range(3):
        clock.t += 61
        p.update(1)
    assert len(lines) == 3 and lines[0].startswith("answer 1/10,000 (0%)")


def test_jsonl_tracker_logs_progress_ledger_and_names(tmp_path):
    tracker = make_tracker(JsonlTrackerSettings(name="jsonl", file="t.jsonl", run_name="try1", group="sweepA"),
                           dir=str(tmp_path))
    assert isinstance(tracker, JsonlTracker)
    tracker.log_config({"seed": 0})
    listener = watch_progress(tracker)
    try:
        with progress.Progress("embed", 3, tty=False, emit=lambda s: None) as p:
            p.update(3)
    finally:
        progress.remove_listener(listener)
    led = Ledger()
    led.record("extract_facts", calls=4, prompt_tokens=100)
    log_ledger(tracker, "build", led)
    tracker.finish()
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["event"] for r in rows] == ["config", "metrics", "metrics", "finish"]
    assert {r["run_name"] for r in rows} == {"try1"} and {r["group"] for r in rows} == {"sweepA"}
    assert rows[1]["metrics"]["progress/embed/done"] == 3 and rows[1]["metrics"]["progress/embed/fraction"] == 1.0
    assert rows[2]["metrics"]["build/ledger/stages/extract_facts/calls"] == 4


def test_wandb_gets_run_name_and_group(monkeypatch):
    import wandb

    seen = {}

    class Run:
        config = None

    monkeypatch.setattr(wandb, "init", lambda **kw: seen.update(kw) or Run())
    make_tracker(WandbTrackerSettings(name="wandb", project="p", mode="offline", entity=None, run_name="r", group="g",
                                      tags=["a"]))
    assert seen["name"] == "r" and seen["group"] == "g" and seen["tags"] == ["a"] and seen["mode"] == "offline"
