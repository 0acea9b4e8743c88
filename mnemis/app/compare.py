"""``mnemis compare <run dirs | multirun dirs> [out=DIR]``: one table and one plot across jobs.

Every job directory (one with a ``metrics.json``; a multirun directory is searched for them) becomes one row
per method: the config keys that differ between the jobs (the swept keys) as columns, then judged accuracy
with its 95% CI, token F1, evidence recall and LLM cost. Writes ``compare.md``, ``compare.json`` and
``compare.png`` into ``out`` (default: the directory given, when it is one multirun directory; else
``runs/compare``). The Hydra callback :class:`CompareCallback` runs it at the end of every sweep.
"""

from __future__ import annotations

from mnemis.eval.run_dir import CONFIG_FILE, LEDGER_FILE, METRICS_FILE, RECALL_FILE

import json
import logging
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# config keys that never count as swept: where files go, how a job was invoked, what the launcher numbered
IGNORED_PREFIXES = ("paths.", "hydra.", "run_dir", "command", "tracker.", "verbose", "preflight", "hub_offline",
                    "llm.cache_dir", "llm.cache_mode", "cache_mode", "scale.")
MAX_DEPTH = 4


def find_jobs(paths: Iterable[str | Path]) -> list[Path]:
    """Job directories (with ``metrics.json``) under each path, in a stable order (multirun job numbers)."""
    jobs: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise SystemExit(f"mnemis compare: {p} is not a directory")
        if (p / METRICS_FILE).is_file():
            jobs.append(p)
            continue
        found = sorted((m.parent for m in p.rglob(METRICS_FILE) if len(m.relative_to(p).parts) <= MAX_DEPTH),
                       key=lambda d: [int(x) if x.isdigit() else x for x in d.relative_to(p).parts])
        if not found:
            raise SystemExit(f"mnemis compare: no job directory (with metrics.json) under {p}")
        jobs += found
    return list(dict.fromkeys(jobs))


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: json.dumps(obj, sort_keys=True) if isinstance(obj, list) else obj}


def swept_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Config keys (dotted) whose value differs between the jobs, ignoring file locations and invocation."""
    flats = [_flat(c) for c in configs]
    keys = list(dict.fromkeys(k for f in flats for k in f))
    return [k for k in keys if not k.startswith(IGNORED_PREFIXES)
            and len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1]


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None


def job_rows(job: Path, keys: Sequence[str], config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per method of a job."""
    metrics = _load(job / METRICS_FILE) or {}
    if "judges" in metrics:
        metrics = {"run": metrics}
    recall = _load(job / RECALL_FILE) or {}
    ledger = _load(job / LEDGER_FILE) or {}
    total = ledger.get("total") or {}
    flat = _flat(config)
    rows = []
    for method, m in metrics.items():
        judge = m.get("headline_judge") or next(iter(m.get("judges") or {}), None)
        overall = (((m.get("judges") or {}).get(judge) or {}).get("raw") or {}).get("overall") or {}
        route = f"{method}/fused" if f"{method}/fused" in recall else method
        rec = (recall.get(route) or {}).get("overall") or {}
        rows.append({
            "job": str(job), **{k: flat.get(k) for k in keys}, "method": method, "judge": judge,
            "accuracy": overall.get("accuracy"), "ci": overall.get("ci"), "questions": overall.get("total"),
            "token_f1": ((m.get("answer_scores") or {}).get("overall") or {}).get("f1"),
            "recall": rec.get("direct", rec.get("recall")),
            "prompt_tokens": total.get("prompt_tokens"), "completion_tokens": total.get("completion_tokens"),
            "llm_calls": total.get("calls"),
        })
    return rows


def _overrides(job: Path) -> dict[str, Any] | None:
    """The job's command-line overrides (Hydra's ``.hydra/overrides.yaml``) as ``{key: value}``."""
    path = job / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return None
    import yaml

    try:
        items = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except yaml.YAMLError:
        return None
    out = {}
    for item in items:
        key, _, value = str(item).partition("=")
        out[key.lstrip("+~")] = value
    return out


def compare(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Rows and swept keys for the jobs under ``paths``: the overrides that differ between the jobs when
    every job has Hydra's record of them (a sweep), else every config value that differs."""
    jobs = find_jobs(paths)
    configs = [_load(j / CONFIG_FILE) or {} for j in jobs]
    overrides = [_overrides(j) for j in jobs]
    if len(jobs) > 1 and all(o is not None for o in overrides):
        keys = swept_keys(overrides)  # type: ignore[arg-type]
        configs = [{**_flat(c), **o} for c, o in zip(configs, overrides)]  # type: ignore[dict-item]
    else:
        keys = swept_keys(configs) if len(jobs) > 1 else []
    rows = [r for j, c in zip(jobs, configs) for r in job_rows(j, keys, c)]
    return {"jobs": [str(j) for j in jobs], "swept_keys": keys, "rows": rows}


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{100 * v:.1f}" if pct else f"{v:.3f}"
    return str(v)


def to_markdown(result: Mapping[str, Any], base: Path | None = None) -> str:
    keys = result["swept_keys"]
    head = ["job", *keys, "method", "accuracy %", "95% CI", "n", "token F1", "evidence recall %", "prompt tokens",
            "completion tokens"]
    lines = ["# Comparison across runs", "",
             (f"{len(result['jobs'])} jobs; swept keys: {', '.join(keys) or 'none (the jobs share their config)'}. "
              "Accuracy is the headline judge's, with its bootstrap 95% CI; recall is the fused route's direct "
              "evidence recall; tokens are the job's LLM total."), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        job = Path(r["job"])
        name = str(job.relative_to(base)) if base is not None and job.is_relative_to(base) and job != base else job.name
        ci = r["ci"]
        lines.append("| " + " | ".join([
            name, *(_fmt(r.get(k)) for k in keys), r["method"], _fmt(r["accuracy"], True),
            f"{_fmt(ci[0], True)}–{_fmt(ci[1], True)}" if ci else "–", _fmt(r["questions"]), _fmt(r["token_f1"]),
            _fmt(r["recall"], True), _fmt(r["prompt_tokens"]), _fmt(r["completion_tokens"])]) + " |")
    return "\n".join(lines) + "\n"


def plot(result: Mapping[str, Any], path: Path) -> bool:
    """Accuracy with CI bars per job (x) and method (series); False when there is nothing to plot."""
    rows = [r for r in result["rows"] if r["accuracy"] is not None]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = result["swept_keys"]
    labels = list(dict.fromkeys(
        ", ".join(f"{k.split('.')[-1]}={r.get(k)}" for k in keys) or Path(r["job"]).name for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(labels) * max(len(methods), 1) ** 0.5), 4.0))
    for i, m in enumerate(methods):
        xs, ys, lo, hi = [], [], [], []
        for r in rows:
            if r["method"] != m:
                continue
            label = ", ".join(f"{k.split('.')[-1]}={r.get(k)}" for k in keys) or Path(r["job"]).name
            x = labels.index(label) + (i - (len(methods) - 1) / 2) * width
            y = 100 * r["accuracy"]
            ci = r["ci"] or [r["accuracy"], r["accuracy"]]
            xs.append(x)
            ys.append(y)
            lo.append(max(0.0, y - 100 * ci[0]))
            hi.append(max(0.0, 100 * ci[1] - y))
        ax.bar(xs, ys, width=width, label=m, yerr=[lo, hi], capsize=3)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("accuracy % (95% CI)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_compare(paths: Sequence[str | Path], out: str | Path | None = None) -> Path:
    """Compare the jobs under ``paths``; writes ``compare.md/json/png`` into ``out``; returns the .md path."""
    paths = [Path(p) for p in paths]
    if out is None:
        out = paths[0] if len(paths) == 1 and not (paths[0] / METRICS_FILE).is_file() else Path("runs/compare")
    result = compare(paths)  # before anything is written: a bad path leaves no empty folder behind
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(result, indent=2, default=str))
    md = to_markdown(result, base=paths[0] if len(paths) == 1 else None)
    if plot(result, out / "compare.png"):
        md += "\n![accuracy across jobs](compare.png)\n"
    (out / "compare.md").write_text(md, encoding="utf-8")
    return out / "compare.md"


def compare_command(args: Sequence[str]) -> int:
    """``mnemis compare DIR [DIR ...] [out=DIR]``."""
    outs = [a.split("=", 1)[1] for a in args if a.startswith("out=")]
    dirs = [a for a in args if not a.startswith("out=")]
    if not dirs or any(a in ("-h", "--help") for a in dirs):
        sys.stderr.write("usage: mnemis compare <run dir | multirun dir> [...] [out=DIR]\n")
        return 0 if dirs else 2
    path = write_compare(dirs, outs[-1] if outs else None)
    print(path.read_text(encoding="utf-8").split("![", 1)[0].rstrip())
    print(f"\ncompare: {path}")
    return 0


try:  # the sweep-end hook (Hydra is a dependency; the guard keeps this module importable on its own)
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[assignment,misc]


class CompareCallback(Callback):  # type: ignore[misc]
    """``mnemis compare`` over the sweep directory when a multirun ends (conf/hydra/default.yaml)."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        try:
            path = write_compare([sweep], sweep)
        except SystemExit as exc:  # e.g. every job failed: nothing to compare, the sweep's own errors stand
            log.warning("compare after the sweep: %s", exc)
            return
        print(f"compare: {path}")
