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
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "experiments" / "results" / "cpu_quality.json"
PROMPT_TOKEN_TARGET = 2500
# ``--paper-reply-caps cpu``: completion-token caps of the base-graph stages in paper mode (twice our defaults).
# Paper mode's budgets follow the reply schemas (``auto``: up to thousands of tokens per extraction reply, since
# the paper puts no cap on names or facts). On 2 cores a few parallel sequences decode at about 3 tokens per
# second (docs/engine_settings.md), so one reply that ran away (a name list repeating itself) would hold its
# batch for many minutes. A reply cut at a cap keeps its complete items (salvaged) and counts as truncated in
# the run's health, so how often a cap bit is in the JSON.
PAPER_CPU_REPLY_CAPS = {"extract_entities": 320, "reflect_entities": 192, "extract_facts": 1024,
                        "reflect_facts": 768, "resolve_entities": 256, "dedup_facts": 384, "entity_attributes": 384}


def paper_cap_overrides(caps: str) -> list[str]:
    """The overrides of ``--paper-reply-caps`` (``cpu``: :data:`PAPER_CPU_REPLY_CAPS`; ``none``: the schemas')."""
    if caps == "none":
        return []
    # reply_budget=off: the caps hold as given (the default policy, raise, would lift each to its schema's worst
    # case); stages whose budget is auto keep their worst case under every policy
    return ["reply_budget=off", *(f"ingest.max_tokens.{stage}={n}" for stage, n in PAPER_CPU_REPLY_CAPS.items())]


# ------------------------------------------------------------------------------------ answer scores
def f1_table(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{method: {"overall": {"f1", "n"}, "by_category": {cat: {"f1", "n"}}}}`` from questions.jsonl rows
    (the audited gold when the audit changed it)."""
    from mnemis.eval.answer_scores import answer_scores, mean_scores

    acc: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        gold = r.get("audited_gold") or r.get("gold", "")
        score = answer_scores(r.get("answer", ""), gold, r["category"])
        acc[r["method"]][r["category"]].append(score)
        acc[r["method"]]["overall"].append(score)
    out: dict[str, dict[str, Any]] = {}
    for method, cats in acc.items():
        cell = {c: mean_scores(v) for c, v in cats.items()}
        out[method] = {"overall": cell.pop("overall"), "by_category": cell}
    return out


# ------------------------------------------------------------------------------------------ run dir
def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def accuracy(metrics: dict[str, Any], judge: str = "main") -> dict[str, Any]:
    """Per method: judged accuracy overall (categories 1-4), per category and for the separate ones."""
    out: dict[str, Any] = {}
    for method, m in (metrics or {}).items():
        table = (m.get("judges", {}).get(judge) or next(iter(m.get("judges", {}).values()), {})).get("raw", {})
        cells = {"overall": table.get("overall"), **table.get("by_category", {}), **table.get("separate", {})}
        out[method] = {k: {"accuracy": v.get("accuracy"), "correct": v.get("correct"), "total": v.get("total"),
                           "ci": v.get("ci")} for k, v in cells.items() if v}
        out[method]["judge_failures"] = table.get("judge_failures")
        out[method]["answer_failures"] = m.get("answer_failures")
    return out


def overall_by_judge(metrics: dict[str, Any] | None) -> dict[str, Any]:
    """Per method and judge: overall accuracy, correct, total and CI (to compare modes under one criterion)."""
    return {method: {j: {k: (v.get("raw", {}).get("overall") or {}).get(k) for k in ("accuracy", "correct", "total", "ci")}
                     for j, v in (m.get("judges") or {}).items()} for method, m in (metrics or {}).items()}


def evidence_recall(recall: dict[str, Any] | None) -> dict[str, Any]:
    """Per route: overall direct / reachable recall of the gold evidence episodes, and per category."""
    out = {}
    for route, cats in (recall or {}).items():
        overall = cats.get("overall", {})
        out[route] = {"direct": overall.get("direct"), "reachable": overall.get("reachable"), "n": overall.get("n"),
                      "by_category": {c: {"direct": v.get("direct"), "reachable": v.get("reachable"), "n": v.get("n")}
                                      for c, v in cats.items() if c != "overall"}}
    return out


def stage_rates(ledger: dict[str, Any] | None) -> dict[str, Any]:
    """Per ledger stage: calls, failures (replies never valid after retries), retries, truncated backend
    replies, their rates, prompt/completion tokens and wall seconds. Rates over sent attempts."""
    out = {}
    for stage, s in ((ledger or {}).get("stages") or {}).items():
        calls = s.get("calls", 0)
        sent = calls - s.get("cache_hits", 0)
        attempts = sent + s.get("retries", 0)
        out[stage] = {
            "calls": calls, "cache_hits": s.get("cache_hits", 0), "failures": s.get("failures", 0),
            "retries": s.get("retries", 0), "truncated": s.get("truncated"),
            "failure_rate": round(s.get("failures", 0) / calls, 4) if calls else None,
            "retry_rate": round(s.get("retries", 0) / sent, 4) if sent else None,
            "truncation_rate": (round(s["truncated"] / attempts, 4) if attempts and s.get("truncated") is not None
                                else None),
            "prompt_tokens": s.get("prompt_tokens", 0), "completion_tokens": s.get("completion_tokens", 0),
            "wall_s": round(s.get("wall_s", 0.0), 1),
        }
    return out


def memory_shape(build: dict[str, Any] | None) -> dict[str, Any]:
    """Episodes, entities, facts and categories of the built memory, and entities / facts per episode."""
    counts = Counter()
    for c in ((build or {}).get("store_counts") or {}).values():
        counts.update(c)
    n = counts.get("episodes", 0)
    return {"episodes": n, "entities": counts.get("entities", 0), "facts": counts.get("facts", 0),
            "categories": counts.get("categories", 0),
            "entities_per_episode": round(counts["entities"] / n, 2) if n else None,
            "facts_per_episode": round(counts["facts"] / n, 2) if n else None}


def _stored_build_stats(store: Path) -> dict[str, Any] | None:
    """The base-graph build stats a store keeps (``built:base_graph``), or None."""
    path = store if store.is_absolute() else REPO / store
    if not path.is_file():
        return None
    from mnemis.store import GraphStore

    with GraphStore(path, read_only=True) as s:
        meta = s.get_meta("built:base_graph") or {}
    return meta.get("stats") if isinstance(meta, dict) else None


def build_totals(build: dict[str, Any] | None) -> dict[str, Any] | None:
    """The base-graph build's counters over the whole build: a build resumed across several jobs counts every
    job's calls (``ingest_totals``, or the stage's ``totals``), not only the last job's (``counters``); the
    store's copy when an earlier job built it."""
    if (build or {}).get("ingest_totals"):
        return build["ingest_totals"]
    base = ((build or {}).get("stages") or {}).get("base_graph")
    if base == "reused" and (build or {}).get("store"):  # an earlier job built it: its stats are in the store
        base = _stored_build_stats(Path(build["store"]))
    if not isinstance(base, dict):
        return None
    return base.get("totals") or base.get("counters")


def prompt_cost(ledger: dict[str, Any] | None, n_episodes: int,
                build: dict[str, Any] | None = None) -> dict[str, Any]:
    """Base-graph prompt tokens per episode, against the 2,500 target: from the build's own counters over every
    job of the build (:func:`build_totals`; replies replayed from the cache included) when this run built the
    graph, else from the ledger (``mnemis.ingest.cost``; calls actually sent only)."""
    from mnemis.ingest.cost import cost_report
    from mnemis.models.ledger import Ledger

    counters = build_totals(build)
    per = {k.removeprefix("tokens.prompt."): v for k, v in (counters or {}).items() if k.startswith("tokens.prompt.")}
    if per and n_episodes:
        total = sum(per.values()) / n_episodes
        return {"base_graph_prompt_tokens_per_episode": round(total, 1), "target": PROMPT_TOKEN_TARGET,
                "within_target": total <= PROMPT_TOKEN_TARGET, "source": "build counters (cached replies included)",
                "per_stage": {s: round(v / n_episodes, 1) for s, v in sorted(per.items())}}

    led = Ledger()
    for stage, s in ((ledger or {}).get("stages") or {}).items():
        led.record(stage, **{k: v for k, v in s.items() if k != "batches"})
    rep = cost_report(led, n_episodes)
    return {"base_graph_prompt_tokens_per_episode": rep["prompt_tokens_per_episode"], "target": PROMPT_TOKEN_TARGET,
            "within_target": rep["prompt_tokens_per_episode"] <= PROMPT_TOKEN_TARGET,
            "source": "ledger (calls sent in this run)", "per_stage": {s: v["prompt_tokens_per_episode"] for s, v in rep["stages"].items()}}


def completion_per_episode(build: dict[str, Any] | None, n_episodes: int) -> dict[str, Any] | None:
    """Base-graph completion tokens per episode, from the build's counters over all its jobs (:func:`build_totals`)."""
    totals = build_totals(build)
    per = {k.removeprefix("tokens.completion."): v for k, v in (totals or {}).items()
           if k.startswith("tokens.completion.")}
    if not per or not n_episodes:
        return None
    return {"completion_tokens_per_episode": round(sum(per.values()) / n_episodes, 1),
            "per_stage": {s: round(v / n_episodes, 1) for s, v in sorted(per.items())}}


def paired(rows: Sequence[dict[str, Any]], metrics: dict[str, Any] | None) -> dict[str, Any]:
    """Mnemis against each baseline of the run, and RAG against full context, question by question (every
    judge, per category, token F1)."""
    from mnemis.eval.paired import compare_rows

    methods = {r["method"] for r in rows}
    judges = sorted({j for m in (metrics or {}).values() for j in (m.get("judges") or {})})
    pairs = [*(("mnemis", b) for b in ("rag", "full_context", "mem0")), ("rag", "full_context")]
    return {f"{a}_vs_{b}": compare_rows(rows, a, b, judges=judges) for a, b in pairs if {a, b} <= methods}


def why_disagree(rows: Sequence[dict[str, Any]], metrics: dict[str, Any] | None) -> dict[str, Any]:
    """For Mnemis against each baseline: on the questions only the baseline got right, was the evidence in
    Mnemis' answer context, and which System-2 flags did those questions carry (:mod:`mnemis.eval.disagreement`)."""
    from mnemis.eval.disagreement import disagreements

    judges = sorted({j for m in (metrics or {}).values() for j in (m.get("judges") or {})})
    return disagreements(rows, [("mnemis", b) for b in ("rag", "full_context", "mem0")], judges=judges)


def build_progress(config: dict[str, Any]) -> dict[str, Any] | None:
    """How far the build of an unfinished run got: episodes per stage done, from its store (read-only)."""
    from mnemis.address import memory_address
    from mnemis.scale.shard import sharded_address
    from mnemis.store import GraphStore

    try:  # the run's config.json as it was written (a run from before a settings change included)
        address = sharded_address(memory_address(config), config.get("shard"))
        path = Path(config["paths"]["artifacts_dir"]) / address / config["store"]["filename"]
    except (KeyError, TypeError):
        return None
    path = path if path.is_absolute() else REPO / path
    if not path.is_file():
        return None
    with GraphStore(path, read_only=True) as store:
        groups = [g for g in (config.get("dataset", {}).get("slice", {}).get("groups") or [])]
        out: dict[str, Any] = {}
        for g in groups:
            out[g] = {"episodes": store.counts(g).get("episodes", 0),
                      **{f"{stage}_done": len(store.done(stage, g))
                         for stage in ("extract", "resolve", "facts", "attributes")},
                      "hierarchy_built": store.get_meta("built:hierarchy") is not None}
    return out


def leniency(data: dict[str, Any] | None) -> dict[str, Any] | None:
    if not data:
        return None
    return {"n_questions": data.get("n_questions"),
            "judges": {j: {k: {x: v.get(x) for x in ("accepted", "judged", "rate", "reference_rate")}
                           for k, v in kinds.items()} for j, kinds in data.get("judges", {}).items()}}


def cached_replies(config: dict[str, Any]) -> dict[str, Any]:
    """Per stage, the replies already in the run's LLM cache (a stopped run: what the next run replays)."""
    from mnemis.models.cache_archive import stage_counts

    cache = Path((config.get("paths") or {}).get("cache_dir") or ".cache/mnemis")
    return stage_counts(cache if cache.is_absolute() else REPO / cache)


_LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]\[[^\]]+\]\[\w+\] - (.*)$")
_PROGRESS = re.compile(r"^(.+?) [\d,]+/[\d,]+ \(\d+%\)")


def logged_stage_wall(log: Path) -> dict[str, Any] | None:
    """Wall seconds per stage from a run's ``mnemis.log``, over every sitting that appended to it.

    A run resumed across sittings (or whose summary a replay wrote) has no single timer per stage; its log
    has one line per finished chunk (:mod:`mnemis.progress`). Each progress line is charged the time since the
    log's previous line, so a sitting's start-up and the gap between sittings fall on the non-progress lines
    that open it. A per-turn build step that logs several stages is charged to the one whose line closes it.
    """
    if not log.is_file():
        return None
    from datetime import datetime

    stages: dict[str, dict[str, Any]] = {}
    prev = first = last = None
    for line in log.read_text(errors="replace").splitlines():
        m = _LOG_LINE.match(line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
        first = first if first is not None else m.group(1)
        last = m.group(1)
        prog = _PROGRESS.match(m.group(3))
        if prog and prev is not None:
            s = stages.setdefault(prog.group(1), {"wall_s": 0.0, "lines": 0})
            s["wall_s"] += t - prev
            s["lines"] += 1
        prev = t
    if not stages:
        return None
    return {"log_from": first, "log_to": last,
            "stages": {k: {"wall_s": round(v["wall_s"], 1), "lines": v["lines"]} for k, v in sorted(stages.items())}}


def summarize(run_dir: Path) -> dict[str, Any]:
    """Everything this benchmark reports, read from one ``mnemis run`` directory."""
    run_dir = Path(run_dir)
    rows = [json.loads(ln) for ln in (run_dir / "questions.jsonl").read_text().splitlines() if ln.strip()] \
        if (run_dir / "questions.jsonl").is_file() else []
    build = _load(run_dir / "build_summary.json")
    ledger = _load(run_dir / "ledger.json")
    config = _load(run_dir / "config.json") or {}
    metrics = _load(run_dir / "metrics.json")
    shape = memory_shape(build)
    from mnemis.eval.run_health import run_health

    status = "complete" if metrics is not None else "partial"
    return {
        "status": status,
        **({"build_progress": build_progress(config), "cached_replies": cached_replies(config)}
           if status == "partial" and config else {}),
        "cache_dir": (config.get("paths") or {}).get("cache_dir"),
        "run_dir": os.path.relpath(run_dir, REPO) if run_dir.is_absolute() else str(run_dir),
        "mode": config.get("fidelity"),
        "model": (config.get("llm") or {}).get("backend", {}).get("model"),
        "slice": {**((config.get("dataset") or {}).get("slice") or {}),
                  **{k: v for k, v in ((build or {}).get("dataset") or {}).items() if k != "warnings"}},
        "methods": config.get("methods"),
        "reply_budgets": (config.get("ingest") or {}).get("max_tokens"),
        "reply_budget_policy": (config.get("llm") or {}).get("reply_budget"),
        "accuracy": accuracy(_load(run_dir / "metrics.json")),
        "overall_by_judge": overall_by_judge(_load(run_dir / "metrics.json")),
        "token_f1": f1_table(rows),
        "evidence_recall": evidence_recall(_load(run_dir / "recall.json")),
        "judge_leniency": leniency(_load(run_dir / "leniency.json")),
        "memory": shape,
        # full context's truncation to the answer model's window: budget, questions truncated, tokens kept
        "full_context_window": _load(run_dir / "full_context.json"),
        "prompt_tokens": prompt_cost(ledger, shape["episodes"], build),
        "completion_tokens": completion_per_episode(build, shape["episodes"]),
        "health": run_health(run_dir) if status == "complete" else None,
        "paired": paired(rows, metrics) if rows else {},
        "disagreements": why_disagree(rows, metrics) if rows else {},
        "stages": stage_rates(ledger),
        "method_wall_s": _load(run_dir / "timings.json"),
        # per stage from the log, over every sitting (a resumed or replayed run's ledger holds only its last)
        "logged_stage_wall_s": logged_stage_wall(run_dir / "mnemis.log"),
    }


# ------------------------------------------------------------------------------------------ running
def run_mode(mode: str, experiment: str, run_dir: Path, overrides: Sequence[str],
             stderr_path: Path | None = None) -> float:
    """``mnemis run experiment=... mode=...`` into ``run_dir``; returns its wall seconds. ``stderr_path``: the
    run's standard error goes to that file (a replay reads why it stopped there)."""
    if mode == "paper" and not any(o.lstrip("+").startswith("judge_llms.paper") for o in overrides):
        # the paper judged with GPT-4.1-mini, which this machine cannot reach: judge with the model under test
        # (as the tuned mode does), so the two modes differ only in the method
        overrides = [*overrides, "judge_llms.paper=${llm}"]
    cmd = [sys.executable, "-m", "mnemis.app.cli", "run", f"experiment={experiment}", f"mode={mode}",
           f"hydra.run.dir={run_dir}", *overrides]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline",
           "WANDB_ERROR_REPORTING": "false"}
    print("+", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    if stderr_path is None:
        subprocess.run(cmd, cwd=REPO, env=env, check=True)
    else:
        Path(stderr_path).parent.mkdir(parents=True, exist_ok=True)
        with open(stderr_path, "w") as err:
            subprocess.run(cmd, cwd=REPO, env=env, check=True, stderr=err)
    return time.perf_counter() - t0


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


def run_cache_dir(overrides: Sequence[str]) -> Path:
    """The response cache dir a run with ``overrides`` uses (``paths.cache_dir``, default ``.cache/mnemis``)."""
    given = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("paths.cache_dir=")]
    path = Path(given[-1] if given else ".cache/mnemis")
    return path if path.is_absolute() else REPO / path


def archive_path(out: Path) -> Path:
    return out.with_name(out.stem + ".cache.jsonl.gz")


# figures a replay must reproduce: everything but wall times, paths, the machine and the ledger of what this
# run sent to a model ("stages": a replay sends nothing; the build's token counters, which count cached
# replies too, are compared)
# ("baselines_model_run": the ledger and timers of an earlier sitting whose replies the run replayed)
_VOLATILE = ("wall_s", "total_wall_s", "method_wall_s", "run_dir", "store", "host", "seconds", "load", "stages",
             "cache_dir", "cache_archive", "command", "status", "kept_from", "baselines_model_run")
_REPLAY_KEYS = ("paths.cache_dir=", "paths.artifacts_dir=", "cache_mode=", "hydra.run.dir=")


def figures(obj: Any) -> Any:
    """``obj`` without the keys that differ between two runs of the same work (times, paths)."""
    if isinstance(obj, dict):
        return {k: figures(v) for k, v in obj.items() if not any(k == x or k.endswith(x) for x in _VOLATILE)}
    if isinstance(obj, list):
        return [figures(v) for v in obj]
    return obj


def host() -> dict[str, Any]:
    from mnemis.app.provenance import host as machine

    return machine()


def replay_stopped(mode: str, returncode: int, made_on: dict[str, Any], here: dict[str, Any]) -> str:
    """Why a replay run stopped, for the reader: a ``replay_only cache miss`` in its log means this machine built a
    request the archive does not hold; what differs between the machine that made the archive and this one (CPU
    vector features, library versions) is the first suspect."""
    lines = [(f"{mode}: the replay stopped (exit {returncode}); a 'replay_only cache miss' above names the stage "
              "whose request this machine built differently from the run that made the archive.")]
    if "cpu_features" not in made_on:
        lines.append("The archive does not record the machine that made it; this machine: "
                     f"{here.get('cpu')} with {', '.join(here.get('cpu_features') or []) or 'no known vector features'}.")
    else:
        if made_on["cpu_features"] != here.get("cpu_features"):
            lines.append(f"CPU vector features: archive {', '.join(made_on['cpu_features']) or 'none known'}; "
                         f"here {', '.join(here.get('cpu_features') or []) or 'none known'}.")
        was, now = made_on.get("versions") or {}, here.get("versions") or {}
        moved = sorted(k for k in set(was) | set(now) if k != "mnemis" and was.get(k) != now.get(k))
        if moved:
            lines.append("library versions: " + "; ".join(f"{k} {was.get(k)} -> {now.get(k)}" for k in moved) + ".")
        if len(lines) == 1:
            lines.append("The CPU features and library versions match the archive's: compare the code versions.")
    lines.append("Embeddings and similarities can differ in the last bits between CPUs with other vector features "
                 "or other library versions, and one comparison that flips (a candidate at a similarity threshold, "
                 "a near-tie at a top-k cut) changes a prompt downstream.")
    return "\n".join(lines)


# the settings that choose the CPU kernels and threads of torch, oneDNN, MKL, OpenBLAS and numpy (a replay records them)
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE",
              "NPY_DISABLE_CPU_FEATURES", "OMP_NUM_THREADS")
_BUILT = re.compile(r"built (\w+) in [\d.]+ s|(starting the vLLM engine)")


def models_loaded(run_dirs: Sequence[Path]) -> list[str]:
    """The models the runs in ``run_dirs`` built weights for, from their logs: the embedder or reranker (built on a
    miss of its cache only) and ``llm engine`` (a vLLM engine started; a replay builds the LLM client lazily)."""
    found: set[str] = set()
    for d in run_dirs:
        log = Path(d) / "mnemis.log"
        for m in _BUILT.finditer(log.read_text(errors="replace") if log.is_file() else ""):
            found.add("llm engine" if m.group(2) else m.group(1))
    return sorted(found - {"llm", "selector_llm", "answer_llm"})


def replay_record(run_dirs: Sequence[Path], archive: Path, counts: dict[str, int] | None) -> dict[str, Any]:
    """What a replay that reproduced every figure measured: this machine, the torch kernel path and thread settings
    it ran under, the models it had to load, and (``counts``: it re-archived) the archive's entries and size."""
    env = {k: os.environ.get(k) for k in KERNEL_ENV}
    rec: dict[str, Any] = {"every_figure_reproduced": True, "host": host(),
                           "env": {k: v for k, v in env.items() if v is not None},
                           "models_loaded": models_loaded(run_dirs)}
    if counts is not None:
        rec["archive"] = {"file": os.path.relpath(archive, REPO), "bytes": archive.stat().st_size, **counts}
    return rec


_MISS = re.compile(r"replay_only cache miss in stage '([^']+)': (\d+) request\(s\) have no stored response "
                   r"\(first key (\w+)")


def replay_misses(files: Sequence[Path]) -> list[dict[str, Any]]:
    """The cache misses a replay's logs name (stage, requests, first key), each once, in order."""
    found: dict[tuple, dict[str, Any]] = {}
    for f in files:
        for m in _MISS.finditer(Path(f).read_text(errors="replace") if Path(f).is_file() else ""):
            found.setdefault(m.groups(), {"stage": m.group(1), "requests": int(m.group(2)), "first_key": m.group(3)})
    return list(found.values())


def record_failed_replay(out: Path, misses: dict[str, list[dict[str, Any]]], run_dirs: Sequence[Path]) -> None:
    """Keep a replay that did not reproduce every figure in ``out``'s JSON (``replay_attempts``: this machine, its
    kernel settings and, per mode or variant, the requests the archive did not hold); the archive is left as it is."""
    saved = json.loads(out.read_text())
    rec = {**replay_record(run_dirs, archive_path(out), None), "every_figure_reproduced": False, "misses": misses}
    saved["replay_attempts"] = [*saved.get("replay_attempts", []), rec]
    out.write_text(json.dumps(saved, indent=2, default=str) + "\n")
    print(f"the failed replay is recorded in {out} (replay_attempts)")


def rearchive(out: Path, work_cache: Path, run_dirs: Sequence[Path]) -> dict[str, Any]:
    """After a replay that reproduced every figure: write its cache (the archive's replies plus the embeddings and
    token counts the replay recorded) back as the archive, and the replay's record into ``out``'s JSON."""
    from mnemis.models.cache_archive import export_archive

    archive = archive_path(out)
    counts = export_archive(work_cache, archive)
    saved = json.loads(out.read_text())
    before = {k: v for k, v in (saved.get("cache_archive") or {}).items() if k != "file"}
    saved["cache_archive"] = {"file": os.path.relpath(archive, REPO), **counts}
    if saved.get("replay"):  # an earlier replay's record stays, oldest first
        saved["earlier_replays"] = [*saved.get("earlier_replays", []), saved["replay"]]
    saved["replay"] = {**replay_record(run_dirs, archive, counts), "archive_before": before}
    out.write_text(json.dumps(saved, indent=2, default=str) + "\n")
    print(f"re-archived {archive} ({archive.stat().st_size:,} bytes: {counts}); replay recorded in {out}")
    return saved["replay"]


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
    after = stage_counts(cache)
    added = {st: after[st]["replies"] - before.get(st, {}).get("replies", 0) for st in after}
    counts = export_archive(cache, archive)
    saved["cache_archive"] = {"file": os.path.relpath(archive, REPO), **counts}
    saved["refill"] = {"host": host(), "wall_s": round(time.perf_counter() - t0, 1),
                       "replies_in_archive_before": sum(v["replies"] for v in before.values()),
                       "replies_added_by_model": {k: v for k, v in added.items() if v},
                       "why": "the archive was made on another CPU before embeddings were archived; this machine "
                              "built some requests differently, the model answered those, the rest were replayed"}
    out.write_text(json.dumps(saved, indent=2, default=str) + "\n")
    print(f"refilled {out}: {saved['refill']['replies_added_by_model']}; archive {archive} {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
