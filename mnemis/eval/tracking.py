"""Experiment tracking: a ``Tracker`` protocol, ``NoTracker``, an offline-by-default ``WandbTracker`` and a
plain ``JsonlTracker`` (one JSON object per line, for people without W&B).

One tracker spans a whole job (build and eval): ``watch_progress`` logs every stage's progress as it
goes (``mnemis.progress`` listener), ``log_ledger`` the per-stage cost ledger after the build and the eval.

``tracker.log_run_dir(run_dir)`` logs everything a finished run dir holds: flattened metrics, the
per-question table, the PNG plots, the ledger and leniency. wandb is imported inside
``WandbTracker`` only; ``mode="offline"`` (default) never needs an account or the network.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mnemis.eval.run_dir import LEDGER_FILE, METRICS_FILE, REPORT_FILE, SUMMARY_FILES, read_checked
from mnemis.settings import JsonlTrackerSettings, TrackerSettings, WandbTrackerSettings

log = logging.getLogger(__name__)


@runtime_checkable
class Tracker(Protocol):
    def log_config(self, config: Mapping[str, Any]) -> None: ...
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None: ...
    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None: ...
    def log_images(self, paths: Sequence[str | Path]) -> None: ...
    def log_run_dir(self, run_dir: str | Path) -> None: ...
    def finish(self) -> None: ...


def flatten(obj: Any, prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """Nested dicts to ``{"a/b/c": scalar}``; lists of 2 numbers (CIs) become ``_lo``/``_hi``; other lists dropped."""
    out: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{sep}{k}" if prefix else str(k), sep))
    elif isinstance(obj, (list, tuple)):
        if len(obj) == 2 and all(isinstance(x, (int, float)) or x is None for x in obj):
            out[f"{prefix}_lo"], out[f"{prefix}_hi"] = obj
    elif obj is None or isinstance(obj, (int, float, str, bool)):
        out[prefix] = obj
    return out


def _table_rows(run: Path) -> list[dict[str, Any]]:
    from mnemis.eval.records import read_records
    from mnemis.eval.run_dir import QUESTIONS_FILE

    if not (run / QUESTIONS_FILE).is_file():
        return []
    rows = []
    for r in read_records(run / QUESTIONS_FILE):
        d = r.model_dump()
        for j, lab in r.labels.items():
            d[f"label:{j}"] = lab
        for j, lab in r.audited_labels.items():
            d[f"audited:{j}"] = lab
        d["context_ids"] = " ".join(r.context_ids)
        d["flags"] = " ".join(r.flags)
        d["recall"] = json.dumps(r.recall)
        d.pop("labels"), d.pop("audited_labels")
        rows.append(d)
    return rows


class NoTracker:
    """Tracks nothing."""

    def log_config(self, config: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        pass

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        pass

    def log_images(self, paths: Sequence[str | Path]) -> None:
        pass

    def log_run_dir(self, run_dir: str | Path) -> None:
        pass

    def finish(self) -> None:
        pass


class JsonlTracker:
    """Appends one JSON object per event to ``<dir>/<file>``: ``{"event", "time", ...}``.

    Events: ``config``, ``metrics`` (flattened, with ``step``), ``table`` (rows), ``images`` (paths),
    ``run_dir`` (the metrics files of a finished run dir, flattened), ``finish``.
    """

    def __init__(self, dir: str | Path | None = None, file: str = "tracker.jsonl", run_name: str | None = None,
                 group: str | None = None) -> None:
        self.path = Path(dir or ".") / file
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run_name, self.group = run_name, group

    def _write(self, event: str, **fields: Any) -> None:
        import time

        row = {"event": event, "time": round(time.time(), 3), "run_name": self.run_name, "group": self.group, **fields}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")

    def log_config(self, config: Mapping[str, Any]) -> None:
        self._write("config", config=dict(config))

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self._write("metrics", step=step, metrics=flatten(metrics))

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._write("table", name=name, rows=[dict(r) for r in rows])

    def log_images(self, paths: Sequence[str | Path]) -> None:
        self._write("images", paths=[str(p) for p in paths if Path(p).is_file()])

    def log_run_dir(self, run_dir: str | Path) -> None:
        run = Path(run_dir)
        summary: dict[str, Any] = {}
        for name in SUMMARY_FILES:
            value = read_checked(run / name)
            if value is not None:
                summary.update(flatten(value, prefix=Path(name).stem))
        self._write("run_dir", run_dir=str(run), summary=summary)

    def finish(self) -> None:
        self._write("finish")


class WandbTracker:
    """Weights & Biases run (offline by default: files under ``dir``/wandb, sync later with ``wandb sync``).

    Args:
        project: W&B project name.
        mode: ``offline`` (default), ``online`` or ``disabled``.
        dir: where wandb writes its files (default: current directory).
        entity: W&B entity (team/user), None for the default.
        name: run name; group: W&B group (e.g. one sweep); config: initial run config; tags: run tags.
    """

    def __init__(self, project: str = "mnemis", *, mode: str = "offline", dir: str | Path | None = None,
                 entity: str | None = None, name: str | None = None, config: Mapping[str, Any] | None = None,
                 tags: Sequence[str] | None = None, group: str | None = None) -> None:
        import wandb

        self._wandb = wandb
        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=project, mode=mode, dir=str(dir) if dir is not None else None, entity=entity,
                              name=name, group=group, config=dict(config or {}), tags=list(tags or []))

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.run.config.update(dict(config), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        flat = {k: v for k, v in flatten(metrics).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if flat:
            self.run.log(flat, step=step)

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        cols = list(dict.fromkeys(k for r in rows for k in r))
        data = [[r.get(c) if isinstance(r.get(c), (int, float, str, bool)) or r.get(c) is None else str(r.get(c))
                 for c in cols] for r in rows]
        self.run.log({name: self._wandb.Table(columns=cols, data=data)})

    def log_images(self, paths: Sequence[str | Path]) -> None:
        imgs = {Path(p).stem: self._wandb.Image(str(p)) for p in paths if Path(p).is_file()}
        if imgs:
            self.run.log(imgs)

    def log_run_dir(self, run_dir: str | Path) -> None:
        """Metrics (flattened into the summary), questions table, plots, ledger and leniency of a run dir."""
        run = Path(run_dir)
        for name in SUMMARY_FILES:
            value = read_checked(run / name)
            if value is not None:
                flat = flatten(value, prefix=Path(name).stem)
                self.run.summary.update({k: v for k, v in flat.items() if v is not None})
        self.log_table("questions", _table_rows(run))
        self.log_images(sorted(run.glob("*.png")))
        files = [p for p in (run / LEDGER_FILE, run / METRICS_FILE, run / REPORT_FILE) if p.is_file()]
        if files:
            art = self._wandb.Artifact(f"run-{self.run.id}", type="eval")
            for p in files:
                art.add_file(str(p))
            self.run.log_artifact(art)

    def finish(self) -> None:
        self.run.finish()


def make_tracker(cfg: TrackerSettings, *, dir: str | Path | None = None) -> Tracker:
    """From the ``tracker`` settings (``conf/tracker``): ``name`` is the backend (none | wandb | jsonl);
    ``run_name`` and ``group`` name the run and its group (``tracker.run_name=... tracker.group=...``); ``dir``:
    where its files go (the run dir)."""
    if isinstance(cfg, WandbTrackerSettings):
        return WandbTracker(cfg.project, mode=cfg.mode, dir=dir, entity=cfg.entity, name=cfg.run_name,
                            tags=cfg.tags, group=cfg.group)
    if isinstance(cfg, JsonlTrackerSettings):
        return JsonlTracker(dir=dir, file=cfg.file, run_name=cfg.run_name, group=cfg.group)
    return NoTracker()


def watch_progress(tracker: Tracker) -> Any:
    """Log every ``mnemis.progress`` update to ``tracker`` (``progress/<stage>/done|total|fraction``), at most
    one event per stage every 5 s and always the last; returns the listener (``mnemis.progress.remove_listener``)."""
    import time

    from mnemis import progress

    last: dict[str, float] = {}

    def listener(stage: str, done: int, total: int, elapsed: float) -> None:
        now = time.monotonic()
        if done < total and now - last.get(stage, 0.0) < 5.0:
            return
        last[stage] = now
        tracker.log_metrics({"progress": {stage: {"done": done, "total": total,
                                                  "fraction": done / total if total else 1.0,
                                                  "elapsed_s": round(elapsed, 2)}}})

    progress.add_listener(listener)
    return listener


def log_ledger(tracker: Tracker, phase: str, ledger: Any) -> None:
    """The per-stage cost ledger (calls, tokens, cache hits, wall time) under ``<phase>/ledger/...``."""
    tracker.log_metrics({phase: {"ledger": ledger.to_dict()}})
