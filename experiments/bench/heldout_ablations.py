"""Does System-2 contribute once paper mode's empty-reply exits are closed? Measured on a held-out slice.

With Qwen2.5-Coder-1.5B, paper mode's System-2 adds nothing: the categoriser may reply with no category (the
hierarchy stays flat), the selector may pick no top category (the walk ends empty), and a flat top layer can
make the one selection prompt longer than the model's window (the call fails: in the 1.5B run on LoCoMo conv-26, a flat
layer of 201 categories failed every selection). Ablations close those exits, each
one of our defaults restored on top of ``mode=paper``:

- ``s2_first_pick``: the first selection round must pick at least one top category;
- ``hierarchy_min_assignments``: decoding makes every categorisation reply hold a category of >= n nodes;

and ``all_exits`` applies the two and ``s2_prompt_split`` (candidate lists of more than 60 split into several
prompts; on a slice whose top layer fits one prompt it changes nothing). Every variant runs ``mnemis run
experiment=cpu_heldout mode=paper`` (a slice no setting was tuned on: ``conf/experiment/cpu_heldout.yaml``) with
Mnemis and RAG; the variants share one response cache, so RAG, the base graph and, within a hierarchy setting,
the hierarchy are made once and replayed. The JSON holds per variant: accuracy per judge, System-2's share of
questions with no pick and its evidence recall against System-1's, the hierarchy's shape, Mnemis against RAG
question by question, and each variant against plain paper mode question by question.

    python experiments/bench/heldout_ablations.py                      # several hours on 2 cores
    python experiments/bench/heldout_ablations.py --replay             # every figure again from the archive

The base-graph stages run under the CPU reply caps the conv-26 run used (``--reply-caps cpu``, the default;
``none`` keeps paper mode's schema-sized budgets), and the selection replies under our default budget of
:data:`mnemis.testing.bench_replay.SELECT_CAP_CPU` tokens, whose complete selections a cut reply keeps
(paper mode's budget is the schema's worst case over the whole candidate list: with a first pick required over a flat layer, the selections of
``s2_first_pick`` did not finish in the time we gave them on 2 cores). ``--archive`` (on by default) keeps the replies beside the JSON (``heldout_ablations.cache.jsonl.gz``); a stopped
run continues from its cache (``--seed-cache`` loads the archive first, on another machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.testing import bench_replay, bench_runs

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "experiments" / "results" / "heldout_ablations.json"
EXPERIMENT = "cpu_heldout"
CACHE_DIR = ".cache/mnemis_heldout"
# variant -> overrides on top of mode=paper
VARIANTS: dict[str, list[str]] = {
    "paper": [],
    "s2_first_pick": ["ablation=s2_first_pick"],
    "hierarchy_min_assignments": ["ablation=hierarchy_min_assignments"],
    "all_exits": ["ablation=s2_first_pick", "hierarchy.min_assignments=1",
                  "retrieval.system2.max_candidates_per_prompt=60"],
}


def report(runs_dir: Path, variants: Sequence[str], command: str) -> dict[str, Any]:
    summaries = {v: bench_runs.summarize(runs_dir / v) for v in variants}
    rows = {v: bench_runs.question_rows(runs_dir / v) for v in variants}
    judges = sorted({j for s in summaries.values() for m in (s.get("overall_by_judge") or {}).values() for j in m})
    out = {
        "what": "paper mode and ablations that close its empty-reply exits, on a held-out LoCoMo slice "
                f"(experiment={EXPERIMENT}), Mnemis and RAG, Qwen2.5-Coder-1.5B in every role (judges too)",
        "command": command,
        "experiment": EXPERIMENT,
        "variants": {v: {"overrides": VARIANTS[v], **bench_runs.variant_figures(summaries[v])} for v in variants},
        "against_paper": bench_runs.against_paper(rows, judges),
        "slice": next(iter(summaries.values())).get("slice") if summaries else None,
    }
    if any(s.get("status") != "complete" for s in summaries.values()):
        out["status"] = "partial"
    return out


def run(variants: Sequence[str], runs_dir: Path, out: Path, overrides: Sequence[str], *, archive: bool,
        seed_cache: bool, command: str, refill: bool = False) -> int:
    """Run every variant (``seed_cache``: the archive loaded into the cache first). ``refill``: a seeded re-run that
    re-measures the JSON on this machine, keeping the first sitting's wall times (``wall_s_before_refill``) and
    recording, per stage, the replies the model added to the archive (``refill``)."""
    from mnemis.models.cache_archive import stage_counts

    cache = bench_replay.run_cache_dir([f"paths.cache_dir={CACHE_DIR}", *overrides])
    before_json = json.loads(out.read_text()) if refill and out.is_file() else {}
    if seed_cache and bench_replay.archive_path(out).is_file():
        from mnemis.models.cache_archive import import_archive

        import_archive(bench_replay.archive_path(out), cache)
    before = stage_counts(cache)
    walls = {}
    for v in variants:
        walls[v] = round(bench_replay.run_mode("paper", EXPERIMENT, (runs_dir / v).resolve(),
                                     [f"paths.cache_dir={cache}", *VARIANTS[v], *overrides]), 1)
    result = {**report(runs_dir, variants, command), "overrides": list(overrides), "wall_s": walls,
              "host": bench_replay.host()}
    if refill:
        result["wall_s_before_refill"] = before_json.get("wall_s")
        result["refill"] = bench_replay.refill_record(before, stage_counts(cache))
    if archive:
        from mnemis.models.cache_archive import export_archive

        counts = export_archive(cache, bench_replay.archive_path(out))
        result["cache_archive"] = {"file": os.path.relpath(bench_replay.archive_path(out), REPO), **counts}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0


def replay(out: Path, overrides: Sequence[str], *, rearchive: bool = False) -> int:
    """Every variant again from the archive alone (``cache_mode=replay_only``); exit 1 when a figure differs.
    ``rearchive``: when every figure came out the same, keep the replay's cache as the archive and record the
    replay in the JSON (``mnemis.testing.bench_replay.rearchive``)."""
    from mnemis.models.cache_archive import import_archive

    saved = json.loads(out.read_text())
    work = Path(tempfile.mkdtemp(prefix="heldout_replay_"))
    import_archive(bench_replay.archive_path(out), work / "cache")
    variants = list(saved["variants"])
    runs = [work / "runs" / v for v in variants]

    def misses() -> dict[str, list[dict[str, Any]]]:
        found = {v: bench_replay.replay_misses([work / f"{v}.stderr", work / "runs" / v / "mnemis.log"]) for v in variants}
        return {v: m for v, m in found.items() if m}

    for v in variants:
        try:
            bench_replay.run_mode("paper", EXPERIMENT, work / "runs" / v,
                        [f"paths.cache_dir={work / 'cache'}", f"paths.artifacts_dir={work / 'artifacts'}",
                         "cache_mode=replay_only", *VARIANTS[v], *saved.get("overrides", []), *overrides],
                        stderr_path=work / f"{v}.stderr")
        except subprocess.CalledProcessError as exc:
            print(bench_replay.replay_stopped(v, exc.returncode, saved.get("host") or {}, bench_replay.host()))
            print(f"FIGURES NOT REPRODUCED (replayed runs in {work})")
            if rearchive and exc.returncode > 0:  # (a run stopped by a signal says nothing about the archive)
                bench_replay.record_failed_replay(out, misses(), runs)
            return 1
    now = report(work / "runs", variants, saved.get("command", ""))
    same = json.dumps(bench_replay.figures(now), sort_keys=True) == json.dumps(
        bench_replay.figures({k: v for k, v in saved.items() if k in now}), sort_keys=True)
    print("every figure reproduced" if same else f"FIGURES DIFFER (replayed runs in {work})")
    if same and rearchive:
        bench_replay.rearchive(out, work / "cache", runs)
    elif rearchive:
        bench_replay.record_failed_replay(out, misses(), runs)
    return 0 if same else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {list(VARIANTS)}")
    ap.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "heldout_ablations")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--no-archive", action="store_true", help="do not keep the replies beside the JSON")
    ap.add_argument("--seed-cache", action="store_true", help="load the archive beside --out into the cache first")
    ap.add_argument("--summarize", action="store_true", help="only re-read the run directories of --runs-dir")
    ap.add_argument("--refill", action="store_true",
                    help="re-measure on this machine: --seed-cache with the model loaded (only the requests this "
                         "machine builds differently reach it), keeping the first sitting's wall times")
    ap.add_argument("--replay", action="store_true", help="rerun from the archive alone and compare every figure")
    ap.add_argument("--rearchive", action="store_true",
                    help="with --replay: when every figure is reproduced, write the replay's cache back as the archive "
                         "(adding the embeddings and token counts an older archive lacks) and record the replay")
    ap.add_argument("--reply-caps", choices=("cpu", "none"), default="cpu",
                    help="completion caps of the base-graph stages, as cpu_quality's --paper-reply-caps (cpu: the "
                         "caps the conv-26 run used, so a runaway reply cannot hold a batch for many minutes), "
                         f"and of the selection replies ({bench_replay.SELECT_CAP_CPU}, our default)")
    ap.add_argument("overrides", nargs="*", help="hydra overrides after --")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")
    if "paper" not in variants:
        ap.error("--variants: 'paper' is the baseline every variant is compared with; keep it")
    if args.replay:
        return replay(args.out, args.overrides, rearchive=args.rearchive)
    command = "python experiments/bench/heldout_ablations.py" + (f" --variants {args.variants}"
                                                                  if variants != list(VARIANTS) else "")
    command += f" --reply-caps {args.reply_caps}" if args.reply_caps != "cpu" else ""
    command += " --refill" if args.refill else ""
    command += (" -- " + " ".join(args.overrides)) if args.overrides else ""
    # the caps travel with the overrides, which the JSON keeps, so --replay sends the same requests
    caps = bench_replay.paper_cap_overrides(args.reply_caps)
    caps += [f"retrieval.system2.max_tokens={bench_replay.SELECT_CAP_CPU}"] if args.reply_caps == "cpu" else []
    overrides = [*caps, *args.overrides]
    if args.summarize:
        result = {**report(args.runs_dir, variants, command + " (re-summarised)"), "overrides": overrides,
                  "host": bench_replay.host()}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.out}")
        return 0
    return run(variants, args.runs_dir, args.out, overrides, archive=not args.no_archive,
               seed_cache=args.seed_cache or args.refill, command=command, refill=args.refill)


if __name__ == "__main__":
    raise SystemExit(main())
