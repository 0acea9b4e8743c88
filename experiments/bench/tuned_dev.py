"""Our tuned hierarchy, walk and fusion on the paper's base graph, with Qwen2.5-Coder-1.5B: a dev benchmark.

Every variant runs ``mnemis run experiment=cpu_heldout mode=paper`` plus overrides that put back our hierarchy and
System-2 settings (the two-step categoriser with a top-layer width, window-sized selection pages, our selection
prompt, the entity round, a required first pick, capped expansion) and one fusion option. Ingestion, answering and
judging stay paper mode's, so the base graph, RAG and the plain paper variant replay from the held-out archive
(``heldout_ablations.cache.jsonl.gz``, loaded first) and only the hierarchy, the walk and the fusion cost model time.

Variants (``--variants``):

- ``paper``: plain paper mode (replayed);
- ``tuned_rerank``: our hierarchy and walk, fused by the CPU reranker (SmolLM2-135M, P("yes"));
- ``tuned_rrf``: the same walk, fused by reciprocal-rank fusion of the System-1 and System-2 lists (no model);
- ``tuned_yes``: the same walk, the 1.5B model itself as the P("yes") scorer of at most :data:`PAIRS` pairs a question;
- ``embed_rerank`` / ``embed_rrf`` / ``embed_yes``: ``tuned_rerank`` / ``tuned_rrf`` / ``tuned_yes`` with the nodes placed into the proposed category
  names by the embedder (``hierarchy.assign_by=embedding``) instead of the model's placement reply.
- ``embed_rrf_sim``: ``embed_rrf`` with System-2's lists first put in System-1's relevance order, the search
  restricted to the items the walk reached (``retrieval.fusion.system2_order=similarity``), instead of walk order.
- ``embed_rrf_sim_w``: ``embed_rrf_sim`` with System-2's vote weighing 0.925 of System-1's
  (``retrieval.fusion.system2_weight``, chosen on the dev slice by ``experiments/bench/fusion_weight_sweep.py``).

Dev slices only (``--slice``): ``conv48`` (LoCoMo conv-48 sessions 1-2, 20 questions; its base graph is archived)
or ``conv41`` (conv-41 sessions 1-2; its base graph is built on the first run, hours on 2 cores). conv-26 is the
test conversation and is never tuned on: ``--conv26 VARIANT`` runs the chosen variant against paper mode on all of
conv-26's 152 questions over its archived paper-mode base graph (``cpu_quality_conv26.cache.jsonl.gz``), once every
setting is fixed.

    python experiments/bench/tuned_dev.py                                # dev slice conv-48, every variant
    python experiments/bench/tuned_dev.py --variants paper,tuned_rrf     # a subset (paper is the baseline)
    python experiments/bench/tuned_dev.py --replay                       # every figure again from the archive
    python experiments/bench/tuned_dev.py --conv26 tuned_rrf             # the test, after tuning (many CPU-hours)
    python experiments/bench/tuned_dev.py --conv26 embed_rrf,embed_rrf_sim --reuse-finished  # add a variant

Resumable: each variant's replies go to one response cache as they are made, so a stopped run continues where it
stopped; ``--archive`` (default) keeps them beside the JSON (``tuned_dev.cache.jsonl.gz``).
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

from mnemis.eval.run_dir import (
    CONFIG_FILE,
    CONTEXTS_FILE,
    HIERARCHY_METRICS_FILE,
    LEDGER_FILE,
    METRICS_FILE,
    SYSTEM1_FILE,
    TIMINGS_FILE,
    TRAVERSAL_FILE,
)
from mnemis.eval.route_recall import recall
from mnemis.testing import bench_replay, bench_runs

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "experiments" / "results"
PAIRS = 40  # pairs per question the 1.5B yes/no scorer reads (tuned_yes): 8 episodes, 16 entities, 16 facts
# our hierarchy and walk, on top of mode=paper (each line is one of our defaults; docs/fidelity.md)
TUNED_WALK = [
    "hierarchy.categorizer=two_step", "hierarchy.top_width=8", "hierarchy.layer_rule=shrink",
    "hierarchy.max_existing=60",
    "retrieval.system2.page_by_window=true", "retrieval.system2.prompt_form=ours",
    "retrieval.system2.entity_round=true", "retrieval.system2.min_top_selections=1",
    "retrieval.system2.min_lower_selections=1",
    "retrieval.system2.max_candidates_per_prompt=60", "retrieval.system2.max_facts_per_entity=10",
    "retrieval.system2.max_episodes_per_entity=10", "retrieval.system2.max_neighbours_per_entity=5",
    "retrieval.system2.max_items_per_type=100", "retrieval.system2.max_tokens=512",
]
VARIANTS: dict[str, list[str]] = {
    "paper": [],
    "tuned_rerank": [*TUNED_WALK, "hierarchy.assign_by=llm"],
    "tuned_rrf": [*TUNED_WALK, "hierarchy.assign_by=llm", "retrieval.fusion.scorer=rrf_routes"],
    "tuned_yes": [*TUNED_WALK, "hierarchy.assign_by=llm", "reranker=qwen25_coder_1_5b_cpu",
                  f"retrieval.fusion.max_pairs={PAIRS}"],
    # the same, with the nodes placed into the proposed names by the embedder (the LLM names and describes)
    "embed_rerank": [*TUNED_WALK, "hierarchy.assign_by=embedding"],
    "embed_rrf": [*TUNED_WALK, "hierarchy.assign_by=embedding", "retrieval.fusion.scorer=rrf_routes"],
    "embed_yes": [*TUNED_WALK, "hierarchy.assign_by=embedding", "reranker=qwen25_coder_1_5b_cpu",
                  f"retrieval.fusion.max_pairs={PAIRS}"],
    # rrf_routes with System-2's lists first put in System-1's relevance order (over what the walk reached)
    "embed_rrf_sim": [*TUNED_WALK, "hierarchy.assign_by=embedding", "retrieval.fusion.scorer=rrf_routes",
                      "retrieval.fusion.system2_order=similarity"],
    # that, with System-2's vote weighing 0.925 of System-1's (chosen on the dev slice: fusion_weight_sweep.py)
    "embed_rrf_sim_w": [*TUNED_WALK, "hierarchy.assign_by=embedding", "retrieval.fusion.scorer=rrf_routes",
                        "retrieval.fusion.system2_order=similarity", "retrieval.fusion.system2_weight=0.925"],
}
# dev slices: experiment, overrides, the archive that seeds the cache (None: built on the first run)
SLICES: dict[str, tuple[str, list[str], str | None]] = {
    "conv48": ("cpu_heldout", [], "heldout_ablations"),
    "conv41": ("cpu_heldout", ["dataset.slice.groups=[conv-41]", "dataset.slice.sessions=[1,2]",
                               "run_name=cpu_dev_conv41"], None),
}
TEST = ("cpu_conv26", "cpu_quality_conv26")  # the test conversation: experiment, its paper-mode archive


def hierarchy_shape(hier: dict[str, Any] | None) -> dict[str, Any]:
    """Per group: layers, nodes per layer and the share of category nodes promoted unchanged."""
    out = {}
    for gid, h in (hier or {}).items():
        nodes = h.get("nodes_per_layer") or []
        cats = sum(nodes[1:])
        out[gid] = {"layers": h.get("layers"), "nodes_per_layer": nodes, "stop_reason": h.get("stop_reason"),
                    "promoted_share": round(h.get("promoted", 0) / cats, 4) if cats else None}
    return out


def walk_summary(run_dir: Path) -> dict[str, Any] | None:
    """What System-2's walk did, from the run's ``traversal.jsonl`` (written when retrieval is done, so it is there
    for a run stopped while answering): questions, how many picked a top category, how many picked anything in a
    later round, fallbacks by reason, the entities, facts and turns it brought, selection prompt tokens a question."""
    path = Path(run_dir) / TRAVERSAL_FILE
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    n = len(rows)
    fallbacks: dict[str, int] = {}
    for r in rows:
        if r.get("fallback"):
            fallbacks[r["fallback"]] = fallbacks.get(r["fallback"], 0) + 1
    brought = {k: sum((r.get("counts") or {}).get(k, 0) for r in rows) for k in ("entities", "facts", "episodes")}
    return {"questions": n,
            "picked_a_top_category": sum(1 for r in rows if r["rounds"] and r["rounds"][0]["selected"]),
            "picked_below_the_top": sum(1 for r in rows if any(x["selected"] for x in r["rounds"][1:])),
            "fallbacks": fallbacks, "brought": brought,
            "selection_prompt_tokens_per_question":
                round(sum(x["prompt_tokens"] for r in rows for x in r["rounds"]) / n, 1) if n else None}


def built_hierarchy(run_dir: Path) -> dict[str, Any]:
    """The hierarchy's shape per group from the run's ``hierarchy_metrics.json`` (there once the build is done)."""
    path = Path(run_dir) / HIERARCHY_METRICS_FILE
    if not path.is_file():
        return {}
    out = {}
    for gid, m in json.loads(path.read_text()).items():
        nodes = m.get("nodes_per_layer") or []
        out[gid] = {"nodes_per_layer": nodes, "promoted": m.get("promoted"), "coverage": m.get("coverage"),
                    "multi_parent_rate": m.get("multi_parent_rate"), "llm_calls": m.get("llm_calls"),
                    "llm_failures": m.get("llm_failures"), "stop_reason": m.get("stop_reason")}
    return out


def context_recall(run_dir: Path, gold: dict[str, list[str]]) -> dict[str, Any] | None:
    """Direct evidence recall (the share of a question's gold turns in its list) of System-1's list and of the fused
    context, read from ``system1.jsonl`` and ``contexts.jsonl``: written once retrieval is done, so a run stopped
    while answering has them. Also how many of the fused context's turns System-2 brought (a hit with an ``s2``
    score). Questions without gold evidence are skipped, as in the run's own recall."""
    s1_path, ctx_path = Path(run_dir) / SYSTEM1_FILE, Path(run_dir) / CONTEXTS_FILE
    if not (s1_path.is_file() and ctx_path.is_file()):
        return None
    s1 = {r["question_id"]: set(r["episodes"]) for r in map(json.loads, s1_path.read_text().splitlines())}
    fused, from_s2 = {}, 0
    for r in map(json.loads, ctx_path.read_text().splitlines()):
        fused[r["question_id"]] = {h["id"] for h in r["episodes"]}
        from_s2 += sum(1 for h in r["episodes"] if "s2" in (h.get("scores") or {}))
    asked = [q for q in fused if gold.get(q)]
    if not asked:
        return None

    def mean(lists: dict[str, set[str]]) -> float:  # the run's own per-question share (mnemis.eval.route_recall)
        return round(sum(recall(gold[q], lists.get(q, set())) for q in asked) / len(asked), 4)

    return {"questions": len(asked), "system1_direct": mean(s1), "fused_direct": mean(fused),
            "fused_turns_from_system2": from_s2, "fused_turns": sum(len(v) for v in fused.values())}


def run_gold(run_dir: Path) -> dict[str, list[str]]:
    """Each question's gold evidence turns, from the dataset the run's ``config.json`` names."""
    from mnemis.data.load import load_dataset
    from mnemis.data.sources import DataDirs
    from mnemis.settings import load_settings

    config = json.loads((Path(run_dir) / CONFIG_FILE).read_text())
    config["dataset"]["slice"].setdefault("episodes", None)  # a run made before LoCoMo's slice had the key
    settings = load_settings(config)
    data = load_dataset(settings.dataset, data_dirs=DataDirs.from_paths(settings.paths))
    return {q.id: list(q.evidence) for q in data.questions}


def stage_cost(run_dir: Path) -> dict[str, Any] | None:
    """Calls, tokens and wall time of every model stage of the run (``ledger.json``), and seconds per method
    (``timings.json``). Tokens and time count the calls the model answered in this run; a call answered from the
    response cache (an archived paper-mode reply, or a reply of an earlier sitting) counts in ``from_cache`` only."""
    path = Path(run_dir) / LEDGER_FILE
    if not path.is_file():
        return None
    stages = {}
    for name, s in sorted(json.loads(path.read_text())["stages"].items()):
        if not s.get("calls"):
            continue
        stages[name] = {"calls": s["calls"], "from_cache": s.get("cache_hits", 0),
                        "prompt_tokens": s.get("prompt_tokens", 0), "completion_tokens": s.get("completion_tokens", 0),
                        "failures": s.get("failures", 0), "wall_s": round(float(s.get("wall_s") or 0.0), 1)}
    timings = Path(run_dir) / TIMINGS_FILE
    return {"stages": stages,
            "method_wall_s": json.loads(timings.read_text()) if timings.is_file() else None}


def report(runs_dir: Path, variants: Sequence[str], command: str, experiment: str) -> dict[str, Any]:
    summaries = {v: bench_runs.summarize(runs_dir / v) for v in variants}
    rows = {v: bench_runs.question_rows(runs_dir / v) for v in variants}
    judges = sorted({j for s in summaries.values() for m in (s.get("overall_by_judge") or {}).values() for j in m})
    out: dict[str, Any] = {
        "what": "our hierarchy, System-2 walk and fusion options over paper mode's base graph, answers and judges "
                f"(experiment={experiment}), Mnemis and RAG, Qwen2.5-Coder-1.5B in every role (judges too)",
        "command": command,
        "experiment": experiment,
        "variants": {v: {"overrides": VARIANTS[v], **bench_runs.variant_figures(summaries[v]),
                         "hierarchy_shape": hierarchy_shape((summaries[v].get("health") or {}).get("hierarchy")),
                         "hierarchy_built": built_hierarchy(runs_dir / v), "system2_walk": walk_summary(runs_dir / v),
                         "cost": stage_cost(runs_dir / v),
                         "context_recall": (context_recall(runs_dir / v, run_gold(runs_dir / v))
                                            if (runs_dir / v / CONTEXTS_FILE).is_file() else None)}
                     for v in variants},
        "against_paper": bench_runs.against_paper(rows, judges),
        "slice": next(iter(summaries.values())).get("slice") if summaries else None,
    }
    if any(s.get("status") != "complete" for s in summaries.values()):
        out["status"] = "partial"
    return out


def base_overrides(reply_caps: str, *, select_cap: bool) -> list[str]:
    """The reply caps the archived paper-mode run used, so its requests replay unchanged (the held-out run also
    capped the selection replies; the conv-26 run did not)."""
    caps = bench_replay.paper_cap_overrides(reply_caps)
    return [*caps, f"retrieval.system2.max_tokens={bench_replay.SELECT_CAP_CPU}"] if reply_caps == "cpu" and select_cap else caps


def _repo_path(path: Path) -> str:
    """``path`` relative to the checkout whose ``experiments/results`` holds it (the bench may run from a copy)."""
    path = path.resolve()
    root = path.parents[2] if path.parent.name == "results" and path.parent.parent.name == "experiments" else REPO
    return os.path.relpath(path, root)


def run(variants: Sequence[str], experiment: str, slice_overrides: Sequence[str], seed_from: str | None,
        runs_dir: Path, out: Path, cache: Path, overrides: Sequence[str], *, archive: bool, command: str,
        reuse_finished: bool = False, note: str | None = None) -> int:
    from mnemis.models.cache_archive import export_archive, import_archive

    for src in [RESULTS / f"{seed_from}.json"] if seed_from else []:
        if bench_replay.archive_path(src).is_file():
            import_archive(bench_replay.archive_path(src), cache)
    if bench_replay.archive_path(out).is_file():
        import_archive(bench_replay.archive_path(out), cache)
    walls: dict[str, float | None] = {}
    earlier = (json.loads(out.read_text()).get("wall_s") or {}) if out.is_file() else {}
    for v in variants:  # the JSON and the archive are rewritten after every variant: a stop keeps what finished
        if reuse_finished and (runs_dir / v / METRICS_FILE).is_file():
            walls[v] = earlier.get(v)  # finished in an earlier sitting (its replies are in the cache; its wall, if recorded)
        else:
            walls[v] = round(bench_replay.run_mode("paper", experiment, (runs_dir / v).resolve(),
                                         [f"paths.cache_dir={cache}", *slice_overrides, *VARIANTS[v], *overrides]), 1)
        done = list(walls)
        result = {**report(runs_dir, done, command, experiment), "overrides": [*slice_overrides, *overrides],
                  "wall_s": walls, "host": bench_replay.host(), **({"note": note} if note else {})}
        if done != list(variants):
            result["status"] = "partial"
            result["pending_variants"] = [x for x in variants if x not in walls]
        if archive:
            counts = export_archive(cache, bench_replay.archive_path(out))
            result["cache_archive"] = {"file": _repo_path(bench_replay.archive_path(out)), **counts}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {out} ({len(done)} of {len(variants)} variants)")
    return 0


def replay(out: Path) -> int:
    """Every variant again from the archive alone (``cache_mode=replay_only``); exit 1 when a figure differs."""
    from mnemis.models.cache_archive import import_archive

    saved = json.loads(out.read_text())
    work = Path(tempfile.mkdtemp(prefix="tuned_dev_replay_"))
    import_archive(bench_replay.archive_path(out), work / "cache")
    variants = list(saved["variants"])
    for v in variants:
        try:
            bench_replay.run_mode("paper", saved["experiment"], work / "runs" / v,
                        [f"paths.cache_dir={work / 'cache'}", f"paths.artifacts_dir={work / 'artifacts'}",
                         "cache_mode=replay_only", *saved.get("overrides", []), *VARIANTS[v]])
        except subprocess.CalledProcessError as exc:
            print(bench_replay.replay_stopped(v, exc.returncode, saved.get("host") or {}, bench_replay.host()))
            print(f"FIGURES NOT REPRODUCED (replayed runs in {work})")
            return 1
    now = report(work / "runs", variants, saved.get("command", ""), saved["experiment"])
    same = json.dumps(bench_replay.figures(now), sort_keys=True) == json.dumps(
        bench_replay.figures({k: v for k, v in saved.items() if k in now}), sort_keys=True)
    print("every figure reproduced" if same else f"FIGURES DIFFER (replayed runs in {work})")
    return 0 if same else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {list(VARIANTS)}")
    ap.add_argument("--slice", choices=sorted(SLICES), default="conv48", help="the dev slice (never conv-26)")
    ap.add_argument("--conv26", metavar="VARIANTS",
                    help="the test: these variants (comma-separated) and paper mode on all of conv-26 over its "
                         "archived base graph")
    ap.add_argument("--runs-dir", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cache-dir", type=Path, help="the response cache (default .cache/mnemis_<name>)")
    ap.add_argument("--reuse-finished", action="store_true",
                    help="keep a variant whose run directory already holds a finished run (metrics.json)")
    ap.add_argument("--no-archive", action="store_true", help="do not keep the replies beside the JSON")
    ap.add_argument("--replay", action="store_true", help="rerun from the archive alone and compare every figure")
    ap.add_argument("--summarize", action="store_true", help="only re-read the run directories of --runs-dir")
    ap.add_argument("--reply-caps", choices=("cpu", "none"), default="cpu",
                    help="completion caps of the base-graph and selection stages, as the archived runs used")
    ap.add_argument("--note", help="a sentence for the reader kept in the JSON (e.g. which sitting ran what)")
    ap.add_argument("overrides", nargs="*", help="hydra overrides after --")
    args = ap.parse_args(argv)
    if args.conv26:
        tested = [v.strip() for v in args.conv26.split(",") if v.strip()]
        bad = [v for v in tested if v not in VARIANTS or v == "paper"]
        if bad or not tested:
            ap.error(f"--conv26: unknown {bad}; choose from {[v for v in VARIANTS if v != 'paper']}")
        variants, (experiment, seed_from), slice_overrides = ["paper", *tested], TEST, []
        name = "tuned_conv26"
    else:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            ap.error(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")
        if "paper" not in variants:
            ap.error("--variants: 'paper' is the baseline every variant is compared with; keep it")
        experiment, slice_overrides, seed_from = SLICES[args.slice]
        name = "tuned_dev" if args.slice == "conv48" else f"tuned_dev_{args.slice}"
    out = args.out or RESULTS / f"{name}.json"
    if args.replay:
        return replay(out)
    runs_dir = args.runs_dir or REPO / "runs" / name
    command = "python experiments/bench/tuned_dev.py" + (
        f" --conv26 {args.conv26}" if args.conv26 else
        (f" --variants {args.variants}" if variants != list(VARIANTS) else "")
        + (f" --slice {args.slice}" if args.slice != "conv48" else ""))
    command += (" -- " + " ".join(args.overrides)) if args.overrides else ""
    overrides = [*base_overrides(args.reply_caps, select_cap=not args.conv26), *args.overrides]
    if args.summarize:
        result = {**report(runs_dir, variants, command + " (re-summarised)", experiment),
                  "overrides": [*slice_overrides, *overrides], "host": bench_replay.host(),
                  **({"note": args.note} if args.note else {})}
        if out.is_file():  # what only the run knew: its wall times and the archive it wrote
            saved = json.loads(out.read_text())
            result.update({k: saved[k] for k in ("wall_s", "cache_archive", "pending_variants") if k in saved})
            if result.get("pending_variants"):
                result["status"] = "partial"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {out}")
        return 0
    cache = (args.cache_dir or REPO / ".cache" / f"mnemis_{name}").resolve()
    return run(variants, experiment, slice_overrides, seed_from, runs_dir, out, cache, overrides,
               archive=not args.no_archive, command=command, reuse_finished=args.reuse_finished, note=args.note)


if __name__ == "__main__":
    raise SystemExit(main())
