"""Combine the run dirs of the shards of one sharded run into one run dir, as if it had run unsharded.

``merge_runs(run_dirs, out_dir)`` checks that every shard ran the same config (a hash over everything
but the shard key, paths, cache dirs and the run/command bookkeeping, read from each run dir's ``config.json``),
that no group appears in two shards, and that nothing is missing (``check_coverage``): every shard ``0..N-1``
of the ``N``-way split is there and finished (its ``metrics.json``, written last), each group sits in the shard
the split assigns it to, and every configured method (and seed) answered every question the shard lists in its
``shard.json`` (written by the job before its first answer). A gap is refused naming the shard, group or
method. Then it writes:

- ``questions.jsonl``: every shard's rows (in shard order);
- ``metrics.json``: recomputed from those rows with ``mnemis.eval.metrics`` (never averaged);
- ``ledger.json``: the shards' ledgers summed per stage (``{method: ledger}`` layouts summed per key);
- ``hierarchy_metrics.json``: the per-group hierarchy metrics of every shard, concatenated;
- ``recall.json``: per-cell means re-weighted by their ``n`` (cells without ``n`` are left out);
- ``timings.json``: seconds summed; ``shards.json``: provenance; ``config.json``: the common config;
- ``roles.json``, ``leniency.json``, ``graded_leniency.json``: the first shard's (the same config, so the same
  roles and judge controls), so the report keeps its roles table and judge leniency;
- ``cache_archive.jsonl.gz``: the union of the shards' response-cache archives (one file to replay the run
  with ``cache_mode=replay_only``; a key two shards answered differently keeps the first shard's reply and is
  counted in ``shards.json``);
- ``report.md`` (+ plots) via ``mnemis.eval.report.write_report``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mnemis.eval.records import QuestionRecord, dump_json, read_records, write_records
from mnemis.eval.run_dir import (
    ARCHIVE_FILE,
    CONFIG_FILE,
    GRADED_LENIENCY_FILE,
    HIERARCHY_METRICS_FILE,
    LEDGER_FILE,
    LENIENCY_FILE,
    METRICS_FILE,
    QUESTIONS_FILE,
    RECALL_FILE,
    ROLES_FILE,
    SHARDS_FILE,
    SHARD_FILE,
    TIMINGS_FILE,
)
from mnemis.data.shard import assign_shards, parse_shard

# Top-level config keys that may differ between shards of one run (and, at any depth, ``cache_dir``: a shard's
# caches live in its own node-local state dir).
IGNORED_KEYS = ("shard", "paths", "scale", "run_dir", "run_name", "command", "out", "runs")
COPIED_FILES = (ROLES_FILE, LENIENCY_FILE, GRADED_LENIENCY_FILE)
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


def _without_cache_dirs(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _without_cache_dirs(v) for k, v in obj.items() if k != "cache_dir"}
    return obj


def comparable_config(config: Mapping[str, Any], ignore: Sequence[str] = IGNORED_KEYS) -> dict[str, Any]:
    """The config without the keys shards may legitimately differ in."""
    return {k: _without_cache_dirs(v) for k, v in config.items() if k not in set(ignore)}


def merge_config_hash(config: Mapping[str, Any], ignore: Sequence[str] = IGNORED_KEYS) -> str:
    """sha256 (16 hex) of ``comparable_config(config)``: equal for every shard of one run."""
    text = json.dumps(comparable_config(config, ignore), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _config_of(run: Path) -> dict[str, Any]:
    path = run / CONFIG_FILE
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


def write_shard_manifest(run_dir: str | Path, spec: str, groups: Sequence[str], questions: Sequence[Any],
                         methods: Sequence[str], seeds: Sequence[int]) -> None:
    """``shard.json``: what shard ``spec`` must hold: its groups, each group's question ids, the methods and seeds."""
    by_group: dict[str, list[str]] = {str(g): [] for g in groups}
    for q in questions:
        by_group.setdefault(str(q.group_id), []).append(str(q.id))
    dump_json(Path(run_dir) / SHARD_FILE, {"shard": spec, "groups": by_group, "methods": list(methods),
                                          "seeds": [int(x) for x in seeds]})


def _label(run: Path, config: Mapping[str, Any]) -> str:
    return f"shard {config.get('shard')} ({run})" if config.get("shard") else str(run)


def _manifest(run: Path, config: Mapping[str, Any], rows: Sequence[QuestionRecord]) -> dict[str, Any]:
    """The shard's ``shard.json``; a run dir without one (older runs) stands for the questions its rows hold and
    the methods and seeds of its config."""
    path = run / SHARD_FILE
    if path.is_file():
        try:
            man = json.loads(path.read_text(encoding="utf-8"))
            groups = {str(g): [str(q) for q in qs] for g, qs in man["groups"].items()}
            return {"groups": groups, "methods": [str(m) for m in man["methods"]],
                    "seeds": [int(x) for x in man["seeds"]], "listed": True}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MergeError(f"{path}: not a shard manifest ({type(exc).__name__}: {exc})") from None
    groups: dict[str, list[str]] = {}
    for r in rows:
        qs = groups.setdefault(r.group_id, [])
        if r.question_id not in qs:
            qs.append(r.question_id)
    try:
        seeds = config.get("seeds") or [config["seed"]]
    except KeyError:
        raise MergeError(f"{run / 'config.json'}: neither seeds nor seed (a run's config.json holds both)") from None
    return {"groups": groups, "methods": list(config.get("methods") or []), "seeds": [int(x) for x in seeds],
            "listed": False}


def check_coverage(runs: Sequence[Path], configs: Mapping[Path, Mapping[str, Any]],
                   rows: Mapping[Path, Sequence[QuestionRecord]]) -> dict[str, Any]:
    """Refuse (``MergeError``) a merge that would miss work; returns the split's summary.

    Every shard ``0..N-1`` of one ``N``-way split, each once; each finished (``metrics.json``); each group in the
    shard the split assigns it to (checked over the groups the shards list); every method and seed the shard lists
    answered every one of its questions, and no row outside them.
    """
    specs: dict[Path, tuple[int, int] | None] = {r: parse_shard(configs[r].get("shard")) for r in runs}
    sharded = [r for r in runs if specs[r] is not None]
    if sharded and len(sharded) != len(runs):
        plain = [str(r) for r in runs if specs[r] is None]
        raise MergeError(f"cannot merge shards with unsharded runs: {plain} have no shard=i/N in config.json")
    n_total = None
    if sharded:
        counts = {specs[r][1] for r in sharded}  # type: ignore[index]
        if len(counts) > 1:
            raise MergeError("shards of different splits: " + ", ".join(
                f"{r} is shard {configs[r]['shard']}" for r in sharded))
        n_total = counts.pop()
        seen: dict[int, Path] = {}
        for r in sharded:
            i = specs[r][0]  # type: ignore[index]
            if i in seen:
                raise MergeError(f"shard {i}/{n_total} appears twice: {seen[i]} and {r}")
            seen[i] = r
        missing = [f"{i}/{n_total}" for i in range(n_total) if i not in seen]
        if missing:
            raise MergeError(f"missing shard(s) {', '.join(missing)} of the {n_total}-way split: no run dir among "
                             f"{[str(r) for r in runs]} holds them (did every job of the sweep run?)")
    for r in runs:
        if not (r / METRICS_FILE).is_file():
            raise MergeError(f"{_label(r, configs[r])} did not finish: no metrics.json (written when every method "
                             "is done); rerun that shard in the same run dir (hydra.run.dir=...) to resume it")
    manifests = {r: _manifest(r, configs[r], rows[r]) for r in runs}
    if n_total is not None and all(m["listed"] for m in manifests.values()):
        where = assign_shards([g for m in manifests.values() for g in m["groups"]], n_total)
        for r in runs:
            for g in manifests[r]["groups"]:
                if where[g] != specs[r][0]:  # type: ignore[index]
                    raise MergeError(f"group {g!r} is in {_label(r, configs[r])} but the {n_total}-way split of "
                                     f"the shards' groups puts it in shard {where[g]}/{n_total}: the shards "
                                     "loaded different data")
    for r in runs:
        man = manifests[r]
        want = {(g, q) for g, qs in man["groups"].items() for q in qs}
        have: dict[tuple[str, int], set[tuple[str, str]]] = {}
        for rec in rows[r]:
            if (rec.group_id, rec.question_id) not in want:
                raise MergeError(f"{_label(r, configs[r])}: group {rec.group_id!r} question {rec.question_id!r} "
                                 f"(method {rec.method}) is not one of the shard's questions in {SHARD_FILE}")
            have.setdefault((rec.method, rec.seed), set()).add((rec.group_id, rec.question_id))
        for method in man["methods"]:
            for seed in man["seeds"]:
                gap = sorted(want - have.get((method, seed), set()))
                if gap:
                    groups = sorted({g for g, _ in gap})
                    raise MergeError(
                        f"{_label(r, configs[r])}: method {method} (seed {seed}) has no answer for {len(gap)} "
                        f"question(s) in {len(groups)} group(s), first group {gap[0][0]!r} question {gap[0][1]!r}")
    return {"n_shards": n_total, "groups": sum(len(m["groups"]) for m in manifests.values()),
            "manifests": sum(m["listed"] for m in manifests.values())}


def merge_archives(paths: Sequence[str | Path], out: str | Path) -> dict[str, Any]:
    """Union of response-cache archives (gzip JSON lines with ``kind`` and ``key``; a model identity row is keyed
    by its cache and config node): one line per (kind, key), sorted by key within each kind, the first file's line
    where two differ; returns counts and conflicts."""
    import gzip

    kinds: dict[str, dict[str, str]] = {}
    conflicts: list[str] = []
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                try:
                    row = json.loads(line)
                    kind = str(row["kind"])
                    key = str(row["key"]) if kind != "identity" else json.dumps([row["cache"], row["node"]])
                except (ValueError, KeyError, TypeError) as exc:
                    raise MergeError(f"{path}: line {n}: not an archive entry ({exc})") from None
                have = kinds.setdefault(kind, {})
                text = line.rstrip("\n")
                if key not in have:
                    have[key] = text
                elif have[key] != text:
                    conflicts.append(f"{kind}:{key}")
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as raw:
        for kind, rows in kinds.items():
            for key in sorted(rows):
                raw.write((rows[key] + "\n").encode("utf-8"))
    tmp.replace(out)
    return {"entries": {k: len(v) for k, v in kinds.items()}, "conflicts": len(conflicts),
            "conflicting_keys": conflicts[:10]}


def _load(run: Path, name: str) -> Any:
    p = run / name
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def _metric_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """The metric options of the shards' ``config.json`` (its ``judge`` section), as mnemis.app.jobs.run_eval
    passes them."""
    try:
        judge = config["judge"]
        boot = judge["bootstrap"]
        return {"separate": tuple(judge["separate_categories"]), "failed": str(judge["failed"]),
                "n_boot": int(boot["n_boot"]), "seed": int(boot["seed"])}
    except (KeyError, TypeError, ValueError) as exc:
        raise MergeError(f"config.json: no usable judge.separate_categories, judge.failed, judge.bootstrap.n_boot "
                         f"and judge.bootstrap.seed ({type(exc).__name__}: {exc})") from None


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
    configs = {r: _config_of(r) for r in runs}
    config = check_configs({str(r): c for r, c in configs.items()}, ignore)

    rows: list[QuestionRecord] = []
    by_run: dict[Path, list[QuestionRecord]] = {}
    owner: dict[str, str] = {}
    for r in runs:
        qfile = r / QUESTIONS_FILE
        if not qfile.is_file():
            raise MergeError(f"{_label(r, configs[r])}: no {QUESTIONS_FILE} (did the shard finish its eval?)")
        recs = by_run[r] = read_records(qfile)
        for g in sorted({rec.group_id for rec in recs}):
            if g in owner:
                raise MergeError(f"group {g!r} appears in two shards: {owner[g]} and {r}")
            owner[g] = str(r)
        rows += recs
    coverage = check_coverage(runs, configs, by_run)
    hier: dict[str, Any] = {}
    for r in runs:
        h = _load(r, HIERARCHY_METRICS_FILE)
        if isinstance(h, Mapping):
            for g, m in h.items():
                if g in hier:
                    raise MergeError(f"group {g!r} has hierarchy metrics in two shards (second: {r})")
                hier[g] = m

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_records(out / QUESTIONS_FILE, rows)
    copied = {}
    for name in COPIED_FILES:  # the same config gives the same roles and judge controls in every shard
        src = next((r / name for r in runs if (r / name).is_file()), None)
        if src is not None:
            shutil.copyfile(src, out / name)
            copied[name] = str(src)
    roles = _load(out, ROLES_FILE) or {}
    opts = {**_metric_options(config), **({"headline": roles["headline_judge"]} if roles.get("headline_judge")
                                          else {}), **dict(metric_options or {})}
    metrics = metrics_by_method(rows, **opts)
    dump_json(out / METRICS_FILE, metrics)
    ledgers = [led for led in (_load(r, LEDGER_FILE) for r in runs) if led]
    if ledgers:
        dump_json(out / LEDGER_FILE, _sum_ledgers(ledgers))
    if hier:
        dump_json(out / HIERARCHY_METRICS_FILE, hier)
    recall = _merge_recall([_load(r, RECALL_FILE) for r in runs])
    if recall:
        dump_json(out / RECALL_FILE, recall)
    timings: dict[str, float] = {}
    for t in (_load(r, TIMINGS_FILE) for r in runs):
        for k, v in (t or {}).items():
            timings[k] = round(timings.get(k, 0.0) + float(v), 2)
    if timings:
        dump_json(out / TIMINGS_FILE, timings)
    archives = [r / ARCHIVE_FILE for r in runs if (r / ARCHIVE_FILE).is_file()]
    archive = merge_archives(archives, out / ARCHIVE_FILE) if archives else None
    if archive is not None and len(archives) < len(runs):
        archive["missing_from"] = [str(r) for r in runs if not (r / ARCHIVE_FILE).is_file()]
    dump_json(out / CONFIG_FILE, {**config, "shard": None})
    dump_json(out / SHARDS_FILE, {"runs": [str(r) for r in runs],
                                    "config_hash": merge_config_hash(config, ignore),
                                    "groups": len(owner), "records": len(rows), "coverage": coverage,
                                    "copied": copied, "cache_archive": archive})
    write_report(out)
    return metrics


def parse_merge_args(args: Sequence[str]) -> tuple[list[str], str]:
    """``["runs=[a,b]", "out=dir"]`` -> (``["a", "b"]``, ``"dir"``); an entry may be a glob such as
    ``runs/multirun/lme_s_sharded/<date>/<time>/*`` (only dirs holding a ``config.json`` are kept, and not the
    sweep's own ``merged`` dir)."""
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
        if any(c in r for c in "*?["):  # a sweep dir glob: keep the run dirs (a config.json, not a merge's output)
            runs += sorted(p for p in glob.glob(r) if (Path(p) / CONFIG_FILE).is_file()
                           and not (Path(p) / SHARDS_FILE).is_file())
        elif r:
            runs.append(r)
    return runs, opts["out"]


def sweep_run_dirs(sweep: str | Path) -> list[Path]:
    """The job dirs of a sweep (those holding a ``config.json``), at any depth up to three below it."""
    root = Path(sweep)
    found = {p.parent for depth in ("*", "*/*", "*/*/*") for p in root.glob(f"{depth}/config.json")}
    return sorted(found, key=lambda d: [int(x) if x.isdigit() else x for x in d.relative_to(root).parts])


def merge_sweep(sweep: str | Path) -> list[Path]:
    """Merge every sharded run of a finished sweep into ``<sweep>/merged`` (one split) or
    ``<sweep>/merged_<config hash>`` (a sweep over shards and other keys: one merge per setting); returns the
    merged dirs. A sweep whose jobs are not sharded merges nothing."""
    groups: dict[str, list[Path]] = {}
    for run in sweep_run_dirs(sweep):
        if Path(run).name.startswith("merged"):
            continue
        config = _config_of(run)
        if parse_shard(config.get("shard")) is not None:
            groups.setdefault(merge_config_hash(config), []).append(run)
    outs = []
    for digest, runs in groups.items():
        out = Path(sweep) / ("merged" if len(groups) == 1 else f"merged_{digest}")
        merge_runs(runs, out)
        outs.append(out)
    return outs
