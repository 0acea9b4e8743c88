"""Combine the run dirs of the shards of one sharded run into one run dir, as if it had run unsharded.

``merge_runs(run_dirs, out_dir)`` checks that every shard ran the same config (a hash over everything
but the shard key, paths and the run/command bookkeeping, read from each run dir's ``config.json``) and
that no group appears in two shards, then writes:

- ``questions.jsonl``: every shard's rows (in shard order);
- ``metrics.json``: recomputed from those rows with ``mnemis.eval.metrics`` (never averaged);
- ``ledger.json``: the shards' ledgers summed per stage (``{method: ledger}`` layouts summed per key);
- ``hierarchy_metrics.json``: the per-group hierarchy metrics of every shard, concatenated;
- ``recall.json``: per-cell means re-weighted by their ``n`` (cells without ``n`` are left out);
- ``timings.json``: seconds summed; ``shards.json``: provenance; ``config.json``: the common config;
- ``report.md`` (+ plots) via ``mnemis.eval.report.write_report``.
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mnemis.eval.records import QUESTIONS_FILE, QuestionRecord, dump_json, read_records, write_records
from mnemis.eval.run_files import RunFileError

# Top-level config keys that may differ between shards of one run.
IGNORED_KEYS = ("shard", "paths", "run_dir", "run_name", "command", "out", "runs")
_METRIC_KEYS = ("separate", "failed", "n_boot", "seed")


class MergeError(ValueError):
    """Shard run dirs that cannot be merged (mixed configs, duplicate groups, missing files)."""


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    return {prefix: obj}


def comparable_config(config: Mapping[str, Any], ignore: Sequence[str] = IGNORED_KEYS) -> dict[str, Any]:
    """The config without the keys shards may legitimately differ in."""
    return {k: v for k, v in config.items() if k not in set(ignore)}


def merge_config_hash(config: Mapping[str, Any], ignore: Sequence[str] = IGNORED_KEYS) -> str:
    """sha256 (16 hex) of ``comparable_config(config)``: equal for every shard of one run."""
    text = json.dumps(comparable_config(config, ignore), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _config_of(run: Path) -> dict[str, Any]:
    path = run / "config.json"
    if not path.is_file():
        raise MergeError(f"{run}: no config.json (not a mnemis run dir?)")
    return json.loads(path.read_text(encoding="utf-8"))


def check_configs(configs: Mapping[str, Mapping[str, Any]],
                  ignore: Sequence[str] = IGNORED_KEYS) -> dict[str, Any]:
    """Raise ``MergeError`` naming the differing keys unless all configs agree; returns the first."""
    items = list(configs.items())
    base_name, base = items[0]
    want = merge_config_hash(base, ignore)
    flat_base = _flatten(comparable_config(base, ignore))
    for name, cfg in items[1:]:
        if merge_config_hash(cfg, ignore) == want:
            continue
        flat = _flatten(comparable_config(cfg, ignore))
        a, b = (lambda k: flat_base.get(k, "<absent>")), (lambda k: flat.get(k, "<absent>"))
        diff = sorted(k for k in set(flat_base) | set(flat) if a(k) != b(k))
        shown = ", ".join(f"{k} ({a(k)!r} vs {b(k)!r})" for k in diff[:8])
        more = f" and {len(diff) - 8} more" if len(diff) > 8 else ""
        raise MergeError(f"cannot merge runs of different configs: {base_name} and {name} "
                         f"differ in {shown}{more}")
    return dict(base)


def _sum_ledgers(ledgers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Sum ``Ledger.to_dict()`` layouts (or ``{name: Ledger.to_dict()}`` layouts) per stage and counter."""
    if all("stages" not in led for led in ledgers):  # {method: ledger}
        names = list(dict.fromkeys(k for led in ledgers for k in led))
        return {n: _sum_ledgers([led[n] for led in ledgers if n in led]) for n in names}
    stages: dict[str, dict[str, float]] = {}
    for led in ledgers:
        for stage, counts in (led.get("stages") or {}).items():
            acc = stages.setdefault(stage, {})
            for k, v in counts.items():
                acc[k] = acc.get(k, 0) + v
    total: dict[str, float] = {}
    for counts in stages.values():
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    return {"stages": dict(sorted(stages.items())), "total": total}


def _merge_recall(tables: Sequence[Any]) -> Any:
    """Merge recall tables whose leaf cells carry ``n``: means weighted by ``n``, counts summed."""
    dicts = [t for t in tables if isinstance(t, Mapping)]
    if not dicts:
        return None
    if any("n" in t for t in dicts):
        n = sum(int(t.get("n", 0)) for t in dicts)
        out: dict[str, Any] = {}
        for key in dict.fromkeys(k for t in dicts for k in t):
            vals = [t[key] for t in dicts if key in t]
            if key in ("n", "skipped", "total", "count"):
                out[key] = sum(vals)
            elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                wsum = sum(float(t[key]) * int(t.get("n", 0)) for t in dicts if key in t)
                out[key] = wsum / n if n else None
        return out
    merged = {}
    for key in dict.fromkeys(k for t in dicts for k in t):
        sub = _merge_recall([t[key] for t in dicts if key in t])
        if sub is not None:
            merged[key] = sub
    return merged or None


def _load(run: Path, name: str) -> Any:
    p = run / name
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def _metric_options(config: Mapping[str, Any]) -> dict[str, Any]:
    judge = config.get("judge") or {}
    boot = judge.get("bootstrap") or {}
    return {"separate": tuple(judge.get("separate_categories") or ()),  # as mnemis.app.jobs.run_eval
            "failed": judge.get("failed", "wrong"), "n_boot": int(boot.get("n_boot", 1000)),
            "seed": int(boot.get("seed", 0))}


def merge_runs(run_dirs: Sequence[str | Path], out_dir: str | Path, *, ignore: Sequence[str] = IGNORED_KEYS,
               metric_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Merge shard run dirs into ``out_dir``; returns the recomputed metrics (see the module docstring).

    ``metric_options`` (separate, failed, n_boot, seed) default to the shards' ``judge`` config, so the
    merged ``metrics.json`` equals what the unsharded run would have written.
    """
    from mnemis.eval.metrics import metrics_by_method
    from mnemis.eval.report import write_report

    runs = [Path(r) for r in run_dirs]
    if not runs:
        raise MergeError("no run dirs to merge: pass runs=[dir1,dir2,...]")
    missing = [str(r) for r in runs if not r.is_dir()]
    if missing:
        raise MergeError(f"not run directories: {missing}")
    if len({r.resolve() for r in runs}) != len(runs):
        raise MergeError(f"the same run dir is listed twice in {[str(r) for r in runs]}")
    config = check_configs({str(r): _config_of(r) for r in runs}, ignore)

    rows: list[QuestionRecord] = []
    owner: dict[str, str] = {}
    for r in runs:
        qfile = r / QUESTIONS_FILE
        if not qfile.is_file():
            raise MergeError(f"{r}: no {QUESTIONS_FILE} (did the shard finish its eval?)")
        recs = read_records(qfile)
        for g in sorted({rec.group_id for rec in recs}):
            if g in owner:
                raise MergeError(f"group {g!r} appears in two shards: {owner[g]} and {r}")
            owner[g] = str(r)
        rows += recs
    hier: dict[str, Any] = {}
    for r in runs:
        h = _load(r, "hierarchy_metrics.json")
        if isinstance(h, Mapping):
            for g, m in h.items():
                if g in hier:
                    raise MergeError(f"group {g!r} has hierarchy metrics in two shards (second: {r})")
                hier[g] = m

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_records(out / QUESTIONS_FILE, rows)
    opts = {**_metric_options(config), **dict(metric_options or {})}
    metrics = metrics_by_method(rows, **opts)
    dump_json(out / "metrics.json", metrics)
    ledgers = [led for led in (_load(r, "ledger.json") for r in runs) if led]
    if ledgers:
        dump_json(out / "ledger.json", _sum_ledgers(ledgers))
    if hier:
        dump_json(out / "hierarchy_metrics.json", hier)
    recall = _merge_recall([_load(r, "recall.json") for r in runs])
    if recall:
        dump_json(out / "recall.json", recall)
    timings: dict[str, float] = {}
    for t in (_load(r, "timings.json") for r in runs):
        for k, v in (t or {}).items():
            timings[k] = round(timings.get(k, 0.0) + float(v), 2)
    if timings:
        dump_json(out / "timings.json", timings)
    dump_json(out / "config.json", {**config, "shard": None})
    dump_json(out / "shards.json", {"runs": [str(r) for r in runs],
                                    "config_hash": merge_config_hash(config, ignore),
                                    "groups": len(owner), "records": len(rows)})
    write_report(out)
    return metrics


def parse_merge_args(args: Sequence[str]) -> tuple[list[str], str]:
    """``["runs=[a,b]", "out=dir"]`` -> (``["a", "b"]``, ``"dir"``); an entry may be a glob such as
    ``runs/multirun/lme_s_sharded/<date>/<time>/*`` (only dirs holding a ``config.json`` are kept)."""
    opts: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in ("runs", "out"):
            raise MergeError(f"unexpected argument {arg!r}: "
                             "usage `mnemis merge runs=[dir1,dir2,...] out=dir`")
        opts[key] = value
    if "runs" not in opts or "out" not in opts:
        raise MergeError("usage: mnemis merge runs=[dir1,dir2,...] out=dir")
    runs: list[str] = []
    for r in (r.strip().strip("'\"") for r in opts["runs"].strip().strip("[]").split(",")):
        if any(c in r for c in "*?["):  # a sweep dir glob: keep the run dirs (those with a config.json)
            runs += sorted(p for p in glob.glob(r) if (Path(p) / "config.json").is_file())
        elif r:
            runs.append(r)
    return runs, opts["out"]


def merge_command(args: Sequence[str]) -> dict[str, Any]:
    """``mnemis merge runs=[...] out=...``: merge and print where the report went (exit 2 on a MergeError)."""
    try:
        runs, out = parse_merge_args(args)
        metrics = merge_runs(runs, out)
    except (MergeError, FileNotFoundError, RunFileError) as exc:  # RunFileError: a damaged shard file, named
        raise SystemExit(f"mnemis merge: {exc}") from None
    print(f"merged {len(runs)} runs into {out}: methods {list(metrics)}; report: {Path(out) / 'report.md'}")
    return metrics
