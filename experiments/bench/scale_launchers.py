"""The same sharded ``mnemis run`` through each launcher, on CPU with the scripted model: identical figures?

A synthetic LongMemEval-S-shaped workload (``mnemis.testing.synth``: haystacks of sessions, most filler sessions
drawn from a shared pool, one evidence session per question) runs end to end (build, hierarchy, retrieval,
answers, judge) with ``llm=scripted_scale`` (rule-based replies, no model), the hashing embedder and the cosine
reranker, four ways:

1. ``one_process``: ``mnemis run`` unsharded, in one process;
2. ``joblib_2``: ``mnemis run -m 'shard=0/2,1/2' hydra/launcher=joblib_local hydra.launcher.n_jobs=2``;
3. ``ray_2``: the same through ``hydra/launcher=ray`` on a local Ray with 2 CPUs, each job asking for one unit
   of a custom resource ``gpu_slot`` (2 on the node) that stands in for a GPU;
4. ``ray_2_killed``: as 3, and the benchmark kills one Ray worker (SIGKILL) once its backend has sent
   ``--kill-after`` batches; Ray reruns the task, which resumes the shard from its node-local state.

The sweeps merge by themselves at the end (``<sweep>/merged``). Last, ``replay_merged_archive`` loads the last
sweep's merged response-cache archive into a fresh cache and reruns the workload unsharded with
``cache_mode=replay_only`` (a request the archive lacks is an error). The benchmark compares each merged
``metrics.json``, ``hierarchy_metrics.json`` and the answer/label rows of ``questions.jsonl`` with the
one-process run's exactly, ``recall.json`` to within ``RECALL_TOLERANCE`` (its merged means are re-weighted
from the shards' means, so the last bits of a float may differ; the largest difference is recorded), and
records the wall time of each (process start to exit, merge included)::

    nice python experiments/bench/scale_launchers.py --out experiments/results/scale_launchers.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mnemis.eval.run_dir import (
    ARCHIVE_FILE,
    HIERARCHY_METRICS_FILE,
    METRICS_FILE,
    QUESTIONS_FILE,
    RECALL_FILE,
    SHARDS_FILE,
)
from mnemis.testing.synth import SynthSpec, make_lme, overlap_stats

REPO = Path(__file__).resolve().parents[2]
COMPARED = (METRICS_FILE, RECALL_FILE, HIERARCHY_METRICS_FILE)
ROW_FIELDS = ("method", "seed", "question_id", "group_id", "answer", "labels", "answer_scores")
RECALL_TOLERANCE = 1e-12


def base_overrides(data: Path, work: Path, delay_s: float, beacon: Path | None) -> list[str]:
    return ["experiment=lme_s_sharded", "llm=scripted_scale", "reply_budget=off", "embedder=hashing",
            "reranker=cosine", f"dataset.path={data}", "methods=[mnemis,rag]", "preflight=false", f"paths.cache_dir={work}/cache",
            f"paths.artifacts_dir={work}/artifacts", f"scale.local_dir={work}/local",
            f"llm.backend.delay_s={delay_s}", f"llm.backend.beacon_dir={beacon or 'null'}"]


def mnemis(args: list[str], log: Path, env: dict[str, str] | None = None,
           on_start: Any = None) -> float:
    """``python -m mnemis.app.cli <args>``; returns the wall time; raises with the log's tail on failure."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "mnemis.app.cli", *args], stdout=fh, stderr=subprocess.STDOUT,
                                cwd=REPO, env={**os.environ, **(env or {})})
        if on_start is not None:
            on_start(proc)
        rc = proc.wait()
    wall = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"mnemis {' '.join(args[:3])} failed ({rc}): {log.read_text()[-3000:]}")
    return wall


def figures(run_dir: Path) -> dict[str, Any]:
    """What must be identical across launchers: the figures and every row's answer and labels."""
    out: dict[str, Any] = {name: json.loads((run_dir / name).read_text()) for name in COMPARED
                           if (run_dir / name).is_file()}
    rows = [json.loads(line) for line in (run_dir / QUESTIONS_FILE).read_text().splitlines() if line.strip()]
    out["rows"] = sorted((tuple(json.dumps(r.get(k), sort_keys=True) for k in ROW_FIELDS) for r in rows))
    return out


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest difference between two JSON trees' numbers; inf where their shapes or other values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return max((max_abs_diff(a.get(k), b.get(k)) for k in set(a) | set(b)), default=0.0)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return max((max_abs_diff(x, y) for x, y in zip(a, b)), default=0.0)
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return abs(float(a) - float(b))
    return 0.0 if a == b else float("inf")


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The compared files that differ: exactly, except ``recall.json``, whose merged means are re-weighted from
    the shards' means (``sum(mean_k * n_k) / n``), so they may differ from the one-process means in the last
    bits of a float (up to ``RECALL_TOLERANCE``)."""
    return [k for k in sorted(set(a) | set(b))
            if (max_abs_diff(a.get(k), b.get(k)) > RECALL_TOLERANCE if k == RECALL_FILE else a.get(k) != b.get(k))]


class Killer:
    """Watches the backends' beacons; SIGKILLs the first worker that reports ``after`` batches (once)."""

    def __init__(self, beacon: Path, after: int) -> None:
        self.beacon, self.after = beacon, after
        self.t0 = time.perf_counter()
        self.killed: dict[str, Any] | None = None
        self.pids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self, _proc: Any = None) -> None:
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            for f in self.beacon.glob("[0-9]*") if self.beacon.is_dir() else []:
                pid = int(f.name)
                self.pids.add(pid)
                try:
                    batches, requests = map(int, f.read_text().split())
                except (OSError, ValueError):
                    continue
                if self.killed is None and batches >= self.after:
                    os.kill(pid, signal.SIGKILL)
                    self.killed = {"pid": pid, "batches_before_kill": batches, "requests_before_kill": requests,
                                   "at_s": round(time.perf_counter() - self.t0, 2)}
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def run_all(spec: SynthSpec, work: Path, *, delay_s: float = 0.0, kill_after: int = 20,
            ray_cpus: int = 2, only: tuple[str, ...] | None = None, replay: bool = True) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    items = make_lme(spec)
    data = work / "lme_synth.json"
    data.write_text(json.dumps(items))
    # a worker may take minutes to start on a loaded 2-core machine (Ray's default wait is 60 s)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline", "RAY_DEDUP_LOGS": "0",
           "RAY_worker_register_timeout_seconds": "600",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    runs: dict[str, Any] = {}
    one = work / "one_process"
    runs["one_process"] = {"wall_s": round(mnemis(["run", *base_overrides(data, one, delay_s, None),
                                                   f"hydra.run.dir={one}/run"], work / "one_process.log", env), 2)}
    reference = figures(one / "run")
    ray = ["hydra/launcher=ray", f"hydra.launcher.init.num_cpus={ray_cpus}",
           f"hydra.launcher.init.resources={{gpu_slot: {ray_cpus}}}", "++hydra.launcher.resources.gpu_slot=1"]
    sweeps = {"joblib_2": ["hydra/launcher=joblib_local", "hydra.launcher.n_jobs=2"], "ray_2": ray,
              "ray_2_killed": ray}
    for name, launcher in sweeps.items():
        if only is not None and name not in only:
            continue
        d = work / name
        beacon = d / "beacon" if name.endswith("killed") else None
        killer = Killer(beacon, kill_after) if beacon else None
        args = ["run", "-m", *base_overrides(data, d, delay_s, beacon), "shard=0/2,1/2", *launcher,
                f"hydra.sweep.dir={d}/sweep"]
        print(f"{name}...", flush=True)
        try:
            wall = mnemis(args, work / f"{name}.log", env, on_start=killer.start if killer else None)
        finally:
            if killer:
                killer.stop()
        got = figures(d / "sweep" / "merged")
        runs[name] = {"wall_s": round(wall, 2), "identical_to_one_process": not differences(reference, got),
                      "differs_in": differences(reference, got),
                      "recall_max_abs_diff": max_abs_diff(reference.get(RECALL_FILE), got.get(RECALL_FILE)),
                      "shards": json.loads((d / "sweep" / "merged" / SHARDS_FILE).read_text())["coverage"]}
        if killer:
            runs[name]["kill"] = {**(killer.killed or {}), "worker_pids_seen": len(killer.pids),
                                  "killed": killer.killed is not None}
        print(f"  {runs[name]}", flush=True)
    last = next((work / n for n in reversed(list(sweeps)) if (work / n / "sweep" / "merged").is_dir()), None)
    if replay and last is not None:  # the merged archive replays the whole run in one process, with no model call
        from mnemis.models.cache_archive import import_archive

        where = work / "replay"
        counts = import_archive(last / "sweep" / "merged" / ARCHIVE_FILE, where / "cache")
        wall = mnemis(["run", *base_overrides(data, where, delay_s, None), "cache_mode=replay_only",
                       f"hydra.run.dir={where}/run"], work / "replay.log", env)
        got = figures(where / "run")
        runs["replay_merged_archive"] = {
            "archive": str(last.name), "entries": counts, "wall_s": round(wall, 2),
            "identical_to_one_process": not differences(reference, got), "differs_in": differences(reference, got)}
        print(f"replay: {runs['replay_merged_archive']}", flush=True)
    metrics = reference[METRICS_FILE]
    return {"workload": {**asdict(spec), **overlap_stats(items)},
            "figures": {m: {"questions": v.get("n_questions"), "groups": v.get("n_groups")}
                        for m, v in metrics.items()},
            "runs": runs,
            "all_identical": all(r.get("identical_to_one_process", True) for r in runs.values()),
            "machine": {"cpus": os.cpu_count(), "load_avg_at_end": round(os.getloadavg()[0], 2)},
            "settings": {"delay_s_per_batch": delay_s, "kill_after_batches": kill_after, "ray_cpus": ray_cpus}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=48)
    ap.add_argument("--sessions", type=int, default=4, help="sessions per haystack")
    ap.add_argument("--turns", type=int, default=6, help="turns per session")
    ap.add_argument("--pool", type=int, default=16, help="filler-session pool size")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds the scripted backend sleeps per batch")
    ap.add_argument("--kill-after", type=int, default=15,
                    help="batches a worker sends before it is killed (a shard of the default workload sends ~37)")
    ap.add_argument("--out", default="experiments/results/scale_launchers.json")
    ap.add_argument("--work", default=None, help="scratch dir (default: a temp dir)")
    ap.add_argument("--only", nargs="*", default=None, help="sweeps to run besides one_process (default: all)")
    args = ap.parse_args()
    spec = SynthSpec(groups=args.groups, sessions_per_haystack=args.sessions, pool_size=args.pool,
                     turns_per_session=args.turns, words_per_turn=12)
    work = Path(args.work or tempfile.mkdtemp(prefix="scale_launchers_"))
    result = run_all(spec, work, delay_s=args.delay, kill_after=args.kill_after,
                     only=tuple(args.only) if args.only is not None else None)
    argv = [a for k, a in enumerate(sys.argv) if a != "--work" and (k == 0 or sys.argv[k - 1] != "--work")]
    result["command"] = "python " + " ".join(argv)  # the scratch folder (--work) is this machine's, not the result's
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("runs", "all_identical")}, indent=2))


if __name__ == "__main__":
    main()
