"""The peer libraries side by side with our methods, in one run on one slice with one local model.

Runs ``mnemis run experiment=<experiment> methods=[mnemis,mem0,graphiti,mem0_oss]`` (``pip install -e
".[peers]"`` first; the harness starts a vLLM server on the run's model for the peers) and reads the run dir:

- accuracy (the run's judge) and token F1 per method and category;
- ingestion cost: our build's prompt tokens per episode (ledger), Graphiti's own token count per episode, and
  the tokens the peers' server counted;
- wall time per method, memory size (our entities / facts; Graphiti's entities / facts; Mem0's memories),
  failures per method;
- fidelity checks: entity names our base graph and Graphiti's share, facts per episode of each, contradicted
  facts; Mem0 memories and operations by type.

    python experiments/bench/peers.py                       # the quickstart slice, CPU defaults
    python experiments/bench/peers.py --experiment cpu_small --out experiments/results/peers_cpu_small.json

Writes ``experiments/results/peers_quickstart.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mnemis.eval.run_dir import (
    BUILD_SUMMARY_FILE,
    LEDGER_FILE,
    METRICS_FILE,
    QUESTIONS_FILE,
    TIMINGS_FILE,
)
from mnemis.testing.bench_runs import accuracy, f1_table, prompt_cost

REPO = Path(__file__).resolve().parents[2]


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def mem0_fidelity(ours: dict[str, Any], oss: dict[str, Any]) -> dict[str, Any]:
    """Our Mem0 against mem0ai per conversation: live memories and update operations by type."""
    out: dict[str, Any] = {}
    for g in sorted(set(ours.get("memories") or {}) | set(oss.get("groups") or {})):
        counters = (ours.get("counters") or {}).get(g) or {}
        theirs = (oss.get("groups") or {}).get(g) or {}
        out[g] = {"memories_ours": (ours.get("memories") or {}).get(g),
                  "memories_mem0ai": theirs.get("memories"),
                  "operations_ours": {k.split(".", 1)[1]: v for k, v in sorted(counters.items())
                                      if k.startswith("op.")},
                  "operations_mem0ai": theirs.get("operations")}
    return out


def per_episode(server: dict[str, float] | None, episodes: int) -> float | None:
    """The server's prompt tokens for one peer, per ingested episode (``None`` when it was not measured)."""
    if not server or "prompt_tokens" not in server or not episodes:
        return None
    return round(server["prompt_tokens"] / episodes, 1)


def summarize(run: Path) -> dict[str, Any]:
    from mnemis.eval.records import read_records
    from mnemis.store import GraphStore

    rows = [r.model_dump() for r in read_records(run / QUESTIONS_FILE)]
    build = _load(run / BUILD_SUMMARY_FILE) or {}
    episodes = int((build.get("dataset") or {}).get("episodes") or 0)
    ours_cost = prompt_cost(_load(run / LEDGER_FILE), episodes, build)  # cached replies counted too
    ours_names: set[str] = set()
    ours_contradicted = 0
    counts = build.get("store_counts") or {}
    store = Path(build.get("store", ""))
    if not store.is_absolute():
        store = REPO / store
    if store.is_file():
        with GraphStore(store, read_only=True) as s:
            ours_names = {e.name.casefold() for g in s.groups() for e in s.entities(g)}
            ours_contradicted = sum(1 for g in s.groups() for f in s.facts(g) if f.invalid_at is not None)
    graphiti = _load(run / "graphiti_stats.json") or {}
    mem0_oss = _load(run / "mem0_oss_stats.json") or {}
    mem0_ours = _load(run / "mem0_stats.json") or {}
    g_groups = graphiti.get("groups") or {}
    g_names = {n.casefold() for v in g_groups.values() for n in v.get("entity_names", [])}
    return {
        "accuracy": accuracy(_load(run / METRICS_FILE) or {}),
        "token_f1": f1_table(rows),
        "method_wall_s": _load(run / TIMINGS_FILE),
        "episodes": episodes,
        "ingest_prompt_tokens_per_episode": {
            "mnemis (our base graph)": ours_cost["base_graph_prompt_tokens_per_episode"],
            "mnemis source": ours_cost["source"],
            "graphiti (Graphiti's own count)": graphiti.get("graphiti_input_tokens_per_episode"),
            "peers' server, all peer calls": {m: (s.get("server_counts") or s.get("server_tokens") or {}) for m, s in
                                              (("graphiti", graphiti), ("mem0_oss", mem0_oss))},
            "peers' server, prompt tokens per episode": {
                m: per_episode(s.get("server_counts") or s.get("server_tokens"), episodes)
                for m, s in (("graphiti", graphiti), ("mem0_oss", mem0_oss))}},
        "memory": {"mnemis": counts,
                   "graphiti": {g: {k: v.get(k) for k in ("entities", "facts", "contradicted_facts",
                                                          "episode_failures")} for g, v in g_groups.items()},
                   "mem0_oss": {g: {k: v.get(k) for k in ("memories", "operations", "add_failures",
                                                                        "adds_without_memory")}
                                for g, v in (mem0_oss.get("groups") or {}).items()}},
        "failures": {"graphiti": {"questions": graphiti.get("question_failures"), "error": graphiti.get("error")},
                     "mem0_oss": {"questions": mem0_oss.get("question_failures"), "error": mem0_oss.get("error")}},
        "fidelity": {"entity_names_ours": len(ours_names), "entity_names_graphiti": len(g_names),
                     "entity_names_shared": len(ours_names & g_names),
                     "facts_per_episode_ours": round(sum(c.get("facts", 0) for c in counts.values()) / episodes, 3)
                     if episodes else None,
                     "facts_per_episode_graphiti": round(sum(v.get("facts", 0) for v in g_groups.values()) / episodes,
                                                         3) if episodes else None,
                     "contradicted_facts_ours": ours_contradicted,
                     "contradicted_facts_graphiti": sum(v.get("contradicted_facts") or 0 for v in g_groups.values()),
                     "mem0": mem0_fidelity(mem0_ours, mem0_oss)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="quickstart")
    ap.add_argument("--methods", default="mnemis,mem0,graphiti,mem0_oss")
    ap.add_argument("--run-dir", type=Path, default=REPO / "runs" / "peers")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "peers_quickstart.json")
    ap.add_argument("--summarize", action="store_true",
                    help="only read an existing --run-dir (the command and wall time already in --out are kept)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    run = args.run_dir.resolve() / args.experiment
    wall = None
    if not args.summarize:
        cmd = [sys.executable, "-m", "mnemis.app.cli", "run", f"experiment={args.experiment}",
               f"methods=[{args.methods}]", f"hydra.run.dir={run}", f"peers.server_log={run}.server.log",
               *args.overrides]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
        print("+", " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=REPO, env=env, check=True)
        wall = round(time.perf_counter() - t0, 1)
    command = "python experiments/bench/peers.py " + " ".join(argv or sys.argv[1:])
    before = json.loads(args.out.read_text()) if args.summarize and args.out.is_file() else {}
    if before.get("experiment") == args.experiment:  # re-read a run: keep the command and wall time of the run itself
        command, wall = before.get("command", command), before.get("total_wall_s")
    out = {"what": "our methods and the peer libraries in one run, one slice, one local model; accuracy = the "
                   "run's LLM judge, token F1 = overlap with the gold answer",
           "command": command, "experiment": args.experiment, "total_wall_s": wall, "host": {"cpus": os.cpu_count()},
           **summarize(run)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
