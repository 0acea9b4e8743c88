"""Scale benchmark on a synthetic LongMemEval-S-shaped workload with the scripted LLM (issue 9).

Generates the workload (``mnemis.testing.synth``), then builds every group's base graph three times, each
in fresh stores, every shard a separate process (``python -m mnemis.testing.runner``):

1. ``no_reuse``: 1 process, no response cache: every prompt is sent (what a cache-less run costs);
2. ``reuse_1``: 1 process, fresh shared cache: identical extraction prompts across groups are sent once;
3. ``reuse_2``: 2 processes (shards 0/2 and 1/2) at once, sharing one fresh cache dir.

Reports LLM calls sent and prompt tokens with and without reuse (and their ratio) per stage, wall time
per group, peak memory per process (``ru_maxrss``) and the 1 -> 2 worker speed-up. Default sizes (500
groups, 8 sessions of 6 turns per haystack, 80% of filler sessions from a pool of 400) run in a few
minutes on 2 cores::

    HF_HUB_OFFLINE=1 .venv/bin/python experiments/bench/scale_lme.py --out experiments/results/scale_lme.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mnemis.testing.synth import SynthSpec, make_lme, overlap_stats


def _launch(data: Path, shards: list[str], work: Path, cache: str, scope: str = "group") -> dict[str, Any]:
    """Run the shards as concurrent processes; returns their results and the wall time of the whole."""
    t0 = time.perf_counter()
    procs = []
    for k, shard in enumerate(shards):
        out = work / f"out{k}.json"
        cmd = [sys.executable, "-m", "mnemis.testing.runner", str(data), shard, str(work / f"store{k}.db"), cache,
               str(out), "0", scope]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out))
    results = []
    for proc, out in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"shard failed ({proc.returncode}): {stderr[-2000:]}")
        results.append(json.loads(out.read_text()))
    return {"wall_s": time.perf_counter() - t0, "shards": results}


def _totals(run: dict[str, Any]) -> dict[str, Any]:
    """Sum the shards' ledgers: requests, sent calls (requests - cache hits), prompt tokens, per stage."""
    stages: dict[str, dict[str, int]] = {}
    for sh in run["shards"]:
        for st, c in sh["ledger"]["stages"].items():
            acc = stages.setdefault(st, {"requests": 0, "cache_hits": 0, "prompt_tokens": 0})
            acc["requests"] += c["calls"]
            acc["cache_hits"] += c["cache_hits"]
            acc["prompt_tokens"] += c["prompt_tokens"]
    for acc in stages.values():
        acc["sent"] = acc["requests"] - acc["cache_hits"]
    tot = {k: sum(s[k] for s in stages.values()) for k in ("requests", "cache_hits", "prompt_tokens", "sent")}
    groups = sum(sh["groups"] for sh in run["shards"])
    return {"wall_s": round(run["wall_s"], 2), "groups": groups,
            "wall_s_per_group": round(run["wall_s"] / max(groups, 1), 4),
            "peak_rss_mb_per_process": [round(sh["peak_rss_mb"], 1) for sh in run["shards"]],
            "shard_wall_s": [round(sh["wall_s"], 2) for sh in run["shards"]],
            "shard_cpu_s": [round(sh["cpu_s"], 2) for sh in run["shards"]], "total": tot, "stages": stages,
            "entities": sum(c["entities"] for sh in run["shards"] for c in sh["counts"].values()),
            "facts": sum(c["facts"] for sh in run["shards"] for c in sh["counts"].values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--sessions", type=int, default=8, help="sessions per haystack")
    ap.add_argument("--turns", type=int, default=6, help="turns per session")
    ap.add_argument("--pool", type=int, default=400, help="filler-session pool size")
    ap.add_argument("--overlap", type=float, default=0.8, help="share of filler sessions drawn from the pool")
    ap.add_argument("--words", type=int, default=18, help="filler words per turn")
    ap.add_argument("--out", default="experiments/results/scale_lme.json")
    ap.add_argument("--work", default=None, help="scratch dir (default: a temp dir)")
    ap.add_argument("--context-scope", default="group", choices=["group", "session"],
                    help="ingest.context_scope: session keeps the extraction window inside each session")
    args = ap.parse_args()
    spec = SynthSpec(groups=args.groups, sessions_per_haystack=args.sessions, pool_size=args.pool,
                     overlap=args.overlap, turns_per_session=args.turns, words_per_turn=args.words)
    work = Path(args.work or tempfile.mkdtemp(prefix="scale_lme_"))
    work.mkdir(parents=True, exist_ok=True)
    items = make_lme(spec)
    data = work / "lme_synth.json"
    data.write_text(json.dumps(items))
    runs: dict[str, Any] = {}
    for name, shards, cache in (("no_reuse", ["0/1"], "none"), ("reuse_1", ["0/1"], "cache"),
                                ("reuse_2", ["0/2", "1/2"], "cache")):
        d = work / name
        d.mkdir(exist_ok=True)
        print(f"{name}: {len(shards)} process(es)...", flush=True)
        runs[name] = _totals(_launch(data, shards, d, "none" if cache == "none" else str(d / cache),
                                     args.context_scope))
        print(f"  {runs[name]['wall_s']} s, {runs[name]['total']}", flush=True)
    base, reuse = runs["no_reuse"]["total"], runs["reuse_1"]["total"]
    result = {
        "workload": {**asdict(spec), **overlap_stats(items), "context_scope": args.context_scope},
        "runs": runs,
        "reuse": {"calls_sent_without": base["sent"], "calls_sent_with": reuse["sent"],
                  "calls_ratio": round(reuse["sent"] / max(base["sent"], 1), 4),
                  "prompt_tokens_without": base["prompt_tokens"], "prompt_tokens_with": reuse["prompt_tokens"],
                  "prompt_tokens_ratio": round(reuse["prompt_tokens"] / max(base["prompt_tokens"], 1), 4),
                  "same_graph": (runs["no_reuse"]["entities"], runs["no_reuse"]["facts"])
                  == (runs["reuse_1"]["entities"], runs["reuse_1"]["facts"])
                  == (runs["reuse_2"]["entities"], runs["reuse_2"]["facts"]),
                  "by_stage": {st: {"sent_without": runs["no_reuse"]["stages"][st]["sent"],
                                    "sent_with": runs["reuse_1"]["stages"][st]["sent"],
                                    "cache_hits": runs["reuse_1"]["stages"][st]["cache_hits"]}
                               for st in runs["reuse_1"]["stages"] if st in runs["no_reuse"]["stages"]}},
        "scaling": {"wall_s_1_worker": runs["reuse_1"]["wall_s"], "wall_s_2_workers": runs["reuse_2"]["wall_s"],
                    "speedup": round(runs["reuse_1"]["wall_s"] / max(runs["reuse_2"]["wall_s"], 1e-9), 3),
                    "cpu_s_1_worker": sum(runs["reuse_1"]["shard_cpu_s"]),
                    "cpu_s_2_workers": sum(runs["reuse_2"]["shard_cpu_s"]),
                    "load_avg_at_end": os.getloadavg()[0], "cpus": os.cpu_count(),
                    "cross_shard_cache_hits_2_workers": runs["reuse_2"]["total"]["cache_hits"]},
        "command": "python " + " ".join(sys.argv),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("reuse", "scaling")}, indent=2))


if __name__ == "__main__":
    main()
