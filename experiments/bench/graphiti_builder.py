"""The base graph built by graphiti-core (``ingest.builder=graphiti``, paper mode's default) against ours
(``ingest.builder=mnemis``, batched), each followed by the same hierarchy, routes, answer and judge.

For every builder in ``--builders`` this runs ``mnemis run experiment=<experiment> mode=paper
ingest.builder=<builder> judge_llms.paper=${llm}`` in a subprocess (the paper judged with GPT-4.1-mini, which this
machine cannot reach: the model under test judges, for both builders alike) and reads the run back:

- per episode: prompt and completion tokens of the base graph (the paper's Table 3: about 6,600 prompt tokens per
  episode with Graphiti), LLM calls, entities, facts and mentions;
- failed or cut replies: ours from the ledger (schema failures, truncations), Graphiti's from its counted
  requests (replies cut at ``max_tokens``, requests that raised, ``add_episode`` calls that failed);
- wall time of the base-graph build;
- System-1 evidence recall and judged answer accuracy on the slice's questions (:func:`mnemis.testing.bench_runs.summarize`).

Usage (nice it: the machine is shared)::

    nice -n 10 python experiments/bench/graphiti_builder.py -- "dataset.slice.episodes=[1,3]"   # SmolLM2, 3 turns
    # Qwen2.5-Coder-1.5B on conv-26 session 1 (18 turns, 4 questions; `make setup-cpu-small` first; hours on 2 cores)
    nice -n 10 python experiments/bench/graphiti_builder.py --experiment cpu_small --no-small-model \\
        --out experiments/results/graphiti_builder_1_5b.json -- "dataset.slice.sessions=[1,1]"
    python experiments/bench/graphiti_builder.py --summarize                    # no model run

Writes ``experiments/results/graphiti_builder.json`` (``--out``). Our side (our builder, the hierarchy, the
answers and the judge) replays from the LLM response cache; graphiti-core's requests go to an OpenAI-compatible
server and are not cached, so its build is not replayable (its counts are in the JSON and the store).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mnemis.eval.run_dir import BUILD_SUMMARY_FILE  # noqa: E402
from mnemis.testing.bench_replay import run_mode  # noqa: E402
from mnemis.testing.bench_runs import summarize  # noqa: E402

TABLE3_PROMPT_TOKENS_PER_EPISODE = 6600  # the paper's Table 3 (Graphiti base graph, LoCoMo), rounded as it reads
INGEST_STAGES = ("extract_entities", "reflect_entities", "extract_facts", "reflect_facts", "resolve_entities",
                 "dedup_facts", "entity_attributes")
# SmolLM2 pads every reply to its budget (as the peers in experiment=quickstart): Graphiti's client would otherwise
# send 8,192 per request
SMALL_MODEL = ["ingest.graphiti.max_tokens=256", "ingest.graphiti.server.allow_long_context=true",
               "ingest.graphiti.server.kv_cache_memory_bytes=536870912"]


def graph_shape(store: Path) -> dict[str, Any]:
    """Episodes, entities, facts and mentions of the built memory, and each per episode."""
    from mnemis.store import GraphStore

    with GraphStore(store, read_only=True) as s:
        n = e = f = m = 0
        for g in s.groups():
            n += len(s.episodes(g))
            e += len(s.entities(g))
            f += len(s.facts(g))
            m += len(s.mentions(g))
        built = s.get_meta("built:base_graph") or {}
        meta = s.get_meta("ingest.graphiti")
    per = (lambda x: round(x / n, 2) if n else None)
    return {"episodes": n, "entities": e, "facts": f, "mentions": m, "entities_per_episode": per(e),
            "facts_per_episode": per(f), "mentions_per_episode": per(m),
            "base_graph_wall_s": round(float(built.get("seconds", 0.0)), 1) if isinstance(built, dict) else None,
            "graphiti": meta}


def builder_cost(summary: dict[str, Any], totals: dict[str, Any], n: int) -> dict[str, Any]:
    """LLM calls, prompt / completion tokens per episode and failed or cut replies of the base-graph build."""
    if any(k.startswith("graphiti.") for k in totals):
        g = {k.removeprefix("graphiti."): v for k, v in totals.items() if k.startswith("graphiti.")}
        return {"source": "requests graphiti-core sent (counted at its OpenAI client)",
                "llm_calls": g.get("llm_calls", 0), "llm_calls_per_episode": round(g.get("llm_calls", 0) / n, 2),
                "prompt_tokens_per_episode": round(g.get("prompt_tokens", 0) / n, 1),
                "completion_tokens_per_episode": round(g.get("completion_tokens", 0) / n, 1),
                "cut_replies": g.get("cut_replies", 0), "failed_requests": g.get("failed_requests", 0),
                "failed_add_episode": g.get("failed_steps", 0),
                "failures_by_type": {k.removeprefix("failed."): v for k, v in g.items() if k.startswith("failed.")}}
    stages = {s: v for s, v in (summary.get("stages") or {}).items() if s in INGEST_STAGES}
    calls = sum(v.get("calls", 0) for v in stages.values())
    return {"source": "our ledger (calls sent in this run)", "llm_calls": calls,
            "llm_calls_per_episode": round(calls / n, 2),
            "prompt_tokens_per_episode": round(sum(v.get("prompt_tokens", 0) for v in stages.values()) / n, 1),
            "completion_tokens_per_episode": round(sum(v.get("completion_tokens", 0) for v in stages.values()) / n, 1),
            "cut_replies": sum(v.get("truncated") or 0 for v in stages.values()),
            "failed_replies": sum(v.get("failures", 0) for v in stages.values())}


def report(run_dir: Path) -> dict[str, Any]:
    s = summarize(run_dir)
    build = json.loads((run_dir / BUILD_SUMMARY_FILE).read_text())
    shape = graph_shape(Path(build["store"]))
    totals = build.get("ingest_totals") or {}
    n = max(shape["episodes"], 1)
    recall = (s.get("evidence_recall") or {}).get("mnemis/system1") or {}
    return {"status": s["status"], "run_dir": s["run_dir"], "model": s["model"], "slice": s["slice"],
            "graph": shape, "cost": builder_cost(s, totals, n),
            "table3_prompt_tokens_per_episode": TABLE3_PROMPT_TOKENS_PER_EPISODE,
            "system1_evidence_recall": {k: recall.get(k) for k in ("direct", "reachable", "n")},
            "accuracy": {m: (v.get("overall") or {}) for m, v in (s.get("accuracy") or {}).items()},
            "categories": (s.get("memory") or {}).get("categories"), "health": s.get("health")}


def stopped_build(store: Path) -> dict[str, Any]:
    """What a base-graph build stopped before its end had done, from its store's counters (``ingest.stats``: for
    graphiti-core, bumped after every ``add_episode``): episodes added, requests, prompt and completion tokens and
    wall time, also per episode added. Nothing after the build (hierarchy, answers) exists for it."""
    from mnemis.ingest.common import STATS_KEY
    from mnemis.store import GraphStore

    with GraphStore(store, read_only=True) as s:
        stats = s.get_meta(STATS_KEY) or {}
    g = {k.removeprefix("graphiti."): v for k, v in stats.items() if k.startswith("graphiti.")}
    n = int(g.get("episodes_added", 0))
    per = (lambda x: round(x / n, 1) if n else None)
    return {"status": "stopped in the base-graph build", "episodes_added": n,
            "cost": {"source": "requests graphiti-core sent (counted at its OpenAI client), completed episodes only",
                     "llm_calls": g.get("llm_calls", 0), "llm_calls_per_episode": per(g.get("llm_calls", 0)),
                     "prompt_tokens_per_episode": per(g.get("prompt_tokens", 0)),
                     "completion_tokens_per_episode": per(g.get("completion_tokens", 0)),
                     "wall_s": round(g.get("wall_ms", 0) / 1000, 1), "wall_s_per_episode": per(g.get("wall_ms", 0) / 1000),
                     "failed_add_episode": g.get("failed_steps", 0)},
            "table3_prompt_tokens_per_episode": TABLE3_PROMPT_TOKENS_PER_EPISODE}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="quickstart")
    ap.add_argument("--builders", default="mnemis,graphiti")
    ap.add_argument("--runs-dir", default="runs/graphiti_builder")
    ap.add_argument("--out", default="experiments/results/graphiti_builder.json")
    ap.add_argument("--summarize", action="store_true", help="read the run directories only")
    ap.add_argument("--small-model", action=argparse.BooleanOptionalAction, default=True,
                    help="SmolLM2 settings for Graphiti's client and server (on by default)")
    ap.add_argument("--stopped", action="append", default=[], metavar="BUILDER=STORE",
                    help="with --summarize: a builder whose run stopped in the base-graph build, read from its store "
                         "(its counters of completed episodes) instead of its run directory")
    ap.add_argument("--note", default="", help="free text stored in the JSON (e.g. why a build stopped)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    stopped = dict(x.split("=", 1) for x in args.stopped)
    builders = [b for b in args.builders.split(",") if b]
    out: dict[str, Any] = {"what": "base graph by graphiti-core (ingest.builder=graphiti) vs ours (mnemis), then the "
                                   "same hierarchy, routes, answer and judge (mode=paper)",
                           "experiment": args.experiment, "overrides": list(args.overrides),
                           "small_model_overrides": SMALL_MODEL if args.small_model else [], "builders": {}}
    for b in builders:
        run_dir = REPO / args.runs_dir / b
        if not args.summarize:
            extra = (SMALL_MODEL if args.small_model and b == "graphiti" else [])
            out.setdefault("wall_s", {})[b] = round(run_mode("paper", args.experiment, run_dir,
                                                             [f"ingest.builder={b}", "methods=[mnemis]",
                                                              *extra, *args.overrides]), 1)
        out["builders"][b] = stopped_build(Path(stopped[b])) if b in stopped else report(run_dir)
    if args.note:
        out["note"] = args.note
    if stopped:
        out["status"] = "partial"
    path = REPO / args.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(json.dumps({b: {k: r.get(k) for k in ("graph", "cost", "system1_evidence_recall", "accuracy", "status")}
                      for b, r in out["builders"].items()}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
