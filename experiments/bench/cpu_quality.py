"""Quality on CPU with a real instruction model: run ``experiment=cpu_small`` per mode and summarise it.

For every mode in ``--modes`` (``tuned``, ``paper``) this runs ``mnemis run experiment=<experiment>
mode=<mode>`` in a subprocess (its own vLLM engine; the LLM response cache is shared, so a second run of
the same mode replays) and reads the run directory back:

- accuracy per method and category (the LLM judge, with bootstrap CIs) and the judge-free answer scores per
  method and category (token F1, BLEU-1 and LoCoMo's F1, :mod:`mnemis.eval.answer_scores`);
- evidence recall per route (``recall.json``: direct and reachable), judge leniency on the sampled stress
  questions (``leniency.json``);
- facts and entities per episode of the built memory, prompt tokens per episode of the base graph
  (target <= 2,500), and per LLM stage the schema-failure, retry and truncation rates and wall time
  (``ledger.json``).

Usage (``make setup-cpu-small`` first; the machine is shared, so nice it)::

    nice -n 10 python experiments/bench/cpu_quality.py                       # cpu_small slice, tuned
    nice -n 10 python experiments/bench/cpu_quality.py --modes tuned,paper
    nice -n 10 python experiments/bench/cpu_quality.py -- dataset.slice.sessions=[1,1]   # quick slice
    python experiments/bench/cpu_quality.py --summarize runs/cpu_quality/tuned           # no model run

Writes ``experiments/results/cpu_quality.json`` (``--out``). The numbers come from a 1.5B model on a
small slice: wide confidence intervals, not the paper's scale.

Each mode's summary also holds the run's health (:mod:`mnemis.eval.run_health`: did System-2 pick anything,
its recall against System-1's, names and facts per episode, ...), prompt and completion tokens per episode of
the base graph, and, when the run has Mnemis beside RAG or full context, the paired comparison per question
(:mod:`mnemis.eval.paired`: the difference, its bootstrap CI over questions, the exact McNemar p, per judge and
category, and token F1).

Long runs (``--experiment cpu_conv26``: several CPU-hours) resume after any stop: rerun the same command (the
store, the progress files and the response cache hold what is done); ``--summarize <run dir>`` of an unfinished
run writes a JSON marked ``"status": "partial"`` with the build's progress. ``--archive`` keeps the run's
response and reranker caches beside the JSON (``<out>.cache.jsonl.gz``, :mod:`mnemis.models.cache_archive`), and
``--replay`` reruns every mode from that archive with ``cache_mode=replay_only`` and checks that every figure of
the JSON comes out the same. The archive carries every reply, every reranker score, every embedding call's float32
matrix and the full-context token counts, so a replay calls no model, loads no weights (the LLM client of a replay
never starts its engine; the 1.5B model need not be installed) and computes no embedding, so the CPU's vector
kernels and thread count no longer change its prompts (what remains on the machine is the arithmetic over the
archived vectors: similarity sums and top-k cuts). An archive made before embeddings were archived replays
exactly only on a machine like the one that made it (another CPU's kernels change embeddings in the last bits, and
a near-tie in a similarity ranking can then build another prompt; the replay stops at it and prints what differs,
the JSON's ``host``). ``--replay --archive`` on such a machine writes the replay's cache back as the archive,
embeddings included, and records the replay in the JSON (``replay``; a replay that stops is kept in
``replay_attempts`` with the requests the archive lacks)::

    nice -n 10 python experiments/bench/cpu_quality.py --experiment cpu_conv26 --modes paper \\
        --out experiments/results/cpu_quality_conv26.json --archive
    python experiments/bench/cpu_quality.py --replay --out experiments/results/cpu_quality_conv26.json

A run stopped on one machine continues on another from the archive committed beside its JSON: the same command
with ``--seed-cache`` loads the archive into the run's cache dir first, so every reply already made is replayed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.testing.bench_replay import (
    archive_path,
    figures,
    host,
    paper_cap_overrides,
    rearchive,
    record_failed_replay,
    refill_record,
    replay_misses,
    replay_stopped,
    run_cache_dir,
    run_mode,
)
from mnemis.testing.bench_runs import summarize

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "experiments" / "results" / "cpu_quality.json"


def compare(results: dict[str, Any]) -> dict[str, Any]:
    """paper minus tuned: overall judged accuracy and token F1 per method (when both modes ran)."""
    if not {"tuned", "paper"} <= set(results):
        return {}
    t, p = results["tuned"], results["paper"]
    out = {}
    for method in t["accuracy"]:
        if method not in p["accuracy"]:
            continue
        a_t = (t["accuracy"][method].get("overall") or {}).get("accuracy")
        a_p = (p["accuracy"][method].get("overall") or {}).get("accuracy")
        f_t = t["token_f1"].get(method, {}).get("overall", {}).get("f1")
        f_p = p["token_f1"].get(method, {}).get("overall", {}).get("f1")
        out[method] = {"accuracy_delta": None if None in (a_t, a_p) else round(a_p - a_t, 4),
                       "token_f1_delta": None if None in (f_t, f_p) else round(f_p - f_t, 4)}
    kept = [m for m, r in (("tuned", t), ("paper", p)) if r.get("kept_from")]
    if out and kept:
        out["note"] = f"{' and '.join(kept)} kept from an earlier run: the modes ran different code"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="tuned", help="comma-separated: tuned,paper")
    ap.add_argument("--experiment", default="cpu_small")
    ap.add_argument("--paper-methods", default="mnemis,rag,full_context",
                    help="methods of the paper-mode run ('all': the experiment's own). Mem0 is left out by default: "
                         "its paper settings (per speaker, k 30, full reply budgets) roughly double the run on CPU")
    ap.add_argument("--paper-reply-caps", default="cpu", choices=["cpu", "none"],
                    help="paper mode's base-graph reply budgets: cpu = capped (PAPER_CPU_REPLY_CAPS; cut replies keep "
                         "their complete items and are counted), none = the schemas' worst case, as the paper")
    ap.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "cpu_quality")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--note", default="", help="free text stored in the JSON (e.g. what the slice is)")
    ap.add_argument("--summarize", nargs="*", type=Path, default=None,
                    help="only summarise existing run dirs (their mode is read from config.json)")
    ap.add_argument("--keep-modes", action="store_true",
                    help="with --summarize: keep the modes of --out that are not re-read (marked kept_from: the "
                         "command that measured them)")
    ap.add_argument("--archive", action="store_true",
                    help="after the run, keep its caches (replies, reranker scores, embeddings, token counts) as "
                         "<out stem>.cache.jsonl.gz; with --replay: after a replay that reproduced every figure, "
                         "write its cache back as the archive (adding the embeddings and token counts an older "
                         "archive lacks) and record the replay in the JSON")
    ap.add_argument("--seed-cache", action="store_true",
                    help="before running, load the archive beside --out (<out stem>.cache.jsonl.gz, when present) into "
                         "the run's cache dir: a run stopped on another machine continues where it was")
    ap.add_argument("--replay", action="store_true",
                    help="rerun the modes of --out from its cache archive (replay_only: no model call) and check "
                         "every figure; exit 1 on a difference")
    ap.add_argument("--refill", type=Path, default=None, metavar="WORK",
                    help="re-measure the modes of --out on this machine with the model loaded and its archive as "
                         "the response cache (only requests this machine builds differently reach the model), in "
                         "the resumable folder WORK; writes the new figures and archive")
    ap.add_argument("overrides", nargs="*", help="hydra overrides after --, e.g. dataset.slice.sessions=[1,1]")
    args = ap.parse_args(argv)
    if args.refill is not None:
        return refill(args.out, args.refill)
    if args.replay:
        return replay(args.out, args.runs_dir, rearchive_to=args.archive)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in ("tuned", "paper")]
    if unknown:
        ap.error(f"--modes: unknown {unknown}; choose from tuned, paper")
    results: dict[str, Any] = {}
    if args.summarize is not None:
        for d in args.summarize:
            s = summarize(d)
            results[s["mode"] or d.name] = s
        if args.keep_modes and args.out.is_file():  # modes of the existing file that were not re-read stay
            old = json.loads(args.out.read_text())
            for mode, was in (old.get("modes") or {}).items():
                if mode not in results:
                    results[mode] = {**was, "kept_from": was.get("kept_from") or old.get("command")}
    else:
        if args.seed_cache and archive_path(args.out).is_file():
            from mnemis.models.cache_archive import import_archive

            counts = import_archive(archive_path(args.out), run_cache_dir(args.overrides))
            print(f"seeded {run_cache_dir(args.overrides)} with {counts['llm']} LLM replies and {counts['rerank']} "
                  f"reranker scores from {archive_path(args.out)}")
        for mode in modes:
            run_dir = (args.runs_dir / mode).resolve()
            extra = ([f"methods=[{args.paper_methods}]"] if mode == "paper" and args.paper_methods != "all" else [])
            caps = paper_cap_overrides(args.paper_reply_caps) if mode == "paper" else []
            wall = run_mode(mode, args.experiment, run_dir, [*args.overrides, *caps, *extra])
            results[mode] = {**summarize(run_dir), "total_wall_s": round(wall, 1)}
            if caps:
                results[mode]["mode_overrides"] = caps
    report = {
        "what": f"mnemis run per mode on the slice of experiment={args.experiment} with a real CPU model; accuracy = "
                "LLM judge (the same model; BEAM: the mean of its rubric items), token F1 = normalised token overlap "
                "with the gold answer",
        "command": "python experiments/bench/cpu_quality.py " + " ".join(
            ([f"--modes {args.modes}", f"--experiment {args.experiment}"]
             + ([f"--paper-methods {args.paper_methods}", f"--paper-reply-caps {args.paper_reply_caps}"]
                if "paper" in modes else []) if args.summarize is None else
             ["--summarize"]) + (["--", *args.overrides] if args.overrides else [])),
        "experiment": args.experiment,
        "overrides": list(args.overrides),
        "note": args.note,
        "host": host(),
        "modes": results,
        "paper_minus_tuned": compare(results),
    }
    if any(r.get("status") == "partial" for r in results.values()):
        report["status"] = "partial"
    if args.archive:
        from mnemis.models.cache_archive import export_archive

        cache = Path((next(iter(results.values()))).get("cache_dir") or ".cache/mnemis")
        counts = export_archive(cache if cache.is_absolute() else REPO / cache, archive_path(args.out))
        report["cache_archive"] = {"file": os.path.relpath(archive_path(args.out), REPO), **counts}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


_REPLAY_KEYS = ("paths.cache_dir=", "paths.artifacts_dir=", "cache_mode=", "hydra.run.dir=")


def replay(out: Path, runs_dir: Path, *, rearchive_to: bool = False) -> int:
    """Rerun every mode of ``out`` from its cache archive with ``cache_mode=replay_only`` and compare figures;
    ``rearchive_to``: when every figure came out the same, keep the replay's cache as the archive
    (:func:`rearchive`)."""
    import tempfile

    from mnemis.models.cache_archive import import_archive

    saved = json.loads(out.read_text())
    archive = archive_path(out)
    if not archive.is_file():
        raise SystemExit(f"{out}: no cache archive at {archive} (run with --archive first)")
    work = Path(tempfile.mkdtemp(prefix="cpu_quality_replay_", dir=runs_dir.parent if runs_dir.parent.is_dir() else None))
    counts = import_archive(archive, work / "cache")
    print(f"replaying {counts['llm']} LLM replies and {counts['rerank']} reranker scores from {archive}")
    diffs, killed = [], False  # killed: a run stopped by a signal says nothing about the archive
    for mode, was in saved["modes"].items():
        if was.get("kept_from"):  # measured by an earlier run whose replies the archive need not hold
            print(f"{mode}: kept from an earlier run ({was['kept_from']}); not replayed")
            continue
        overrides = replay_overrides(saved, mode, work / "cache", work / "artifacts", "replay_only")
        try:
            run_mode(mode, saved["experiment"], work / "runs" / mode, overrides, stderr_path=work / f"{mode}.stderr")
        except subprocess.CalledProcessError as exc:
            err = work / f"{mode}.stderr"
            if err.is_file():  # the run's last words: the cache miss that stopped it
                print("\n".join(err.read_text(errors="replace").splitlines()[-3:]))
            print(replay_stopped(mode, exc.returncode, saved.get("host") or {}, host()))
            diffs.append(mode)
            killed = killed or exc.returncode < 0
            continue
        now = summarize(work / "runs" / mode)
        a, b = figures(was), figures(now)
        same = json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
        print(f"{mode}: {'every figure reproduced' if same else 'FIGURES DIFFER'}")
        if not same:
            diffs.append(mode)
            (work / f"replayed_{mode}.json").write_text(json.dumps(now, indent=2, default=str))
    if diffs:
        print(f"replayed summaries kept in {work}")
        if rearchive_to and not killed:
            record_failed_replay(out, {m: replay_misses([work / f"{m}.stderr", work / "runs" / m / "mnemis.log"])
                                       for m in diffs}, [work / "runs" / m for m in saved["modes"]])
        return 1
    if rearchive_to:
        rearchive(out, work / "cache", [work / "runs" / m for m in saved["modes"]])
    return 0


def replay_overrides(saved: dict[str, Any], mode: str, cache: Path, artifacts: Path, cache_mode: str) -> list[str]:
    """The overrides that rerun ``mode`` of a saved JSON as it ran (its budgets and methods) against ``cache``."""
    was = saved["modes"][mode]
    kept = [o for o in saved.get("overrides", []) if not o.startswith(_REPLAY_KEYS)]
    methods = [f"methods=[{','.join(was['methods'])}]"] if was.get("methods") else []
    budgets = [f"ingest.max_tokens.{k}={v}" for k, v in (was.get("reply_budgets") or {}).items()]
    budgets += [f"reply_budget={was['reply_budget_policy']}"] if was.get("reply_budget_policy") else []
    return [*kept, *budgets, *methods, f"cache_mode={cache_mode}", f"paths.cache_dir={cache}",
            f"paths.artifacts_dir={artifacts}"]


def refill(out: Path, work: Path) -> int:
    """Re-measure every mode of ``out`` on this machine from its archive: the same runs with the model loaded and
    the archive as the response cache, so the model answers only the requests this machine builds differently
    (an old archive without embeddings, made on another CPU). Resumable: rerun with the same ``work`` after a stop.
    The new figures replace the old in ``out`` (the old ones kept as ``figures_before_refill``), the cache is
    written back as the archive, and ``refill`` records the machine and, per stage, the replies the model added."""
    from mnemis.models.cache_archive import export_archive, import_archive, stage_counts

    saved = json.loads(out.read_text())
    archive = archive_path(out)
    cache = work / "cache"
    if not (work / "imported.json").is_file():
        if not archive.is_file():
            raise SystemExit(f"{out}: no cache archive at {archive} (run with --archive first)")
        import_archive(archive, cache)
        (work / "imported.json").write_text(json.dumps(stage_counts(cache), indent=1))
    before = json.loads((work / "imported.json").read_text())
    t0 = time.perf_counter()
    for mode, was in list(saved["modes"].items()):
        if was.get("kept_from"):
            continue
        run_dir = work / "runs" / mode
        run_mode(mode, saved["experiment"], run_dir,
                 replay_overrides(saved, mode, cache, work / "artifacts", "readwrite"))
        now = summarize(run_dir)
        now["figures_before_refill"] = {k: was[k] for k in ("accuracy", "token_f1", "evidence_recall") if k in was}
        for k in ("logged_stage_wall_s", "baselines_model_run"):  # the original sittings' timers stay
            if k in was:
                now[k] = was[k]
        saved["modes"][mode] = now
    record = refill_record(before, stage_counts(cache))
    counts = export_archive(cache, archive)
    saved["cache_archive"] = {"file": os.path.relpath(archive, REPO), **counts}
    saved["refill"] = {"host": host(), "wall_s": round(time.perf_counter() - t0, 1), **record}
    out.write_text(json.dumps(saved, indent=2, default=str) + "\n")
    print(f"refilled {out}: {saved['refill']['replies_added_by_model']}; archive {archive} {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
