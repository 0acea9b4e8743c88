"""What the CPU benchmarks read from a finished ``mnemis run`` directory, as one summary
(:func:`summarize`): judged accuracy and token F1 per method, evidence recall, judge leniency, the memory's shape,
prompt and completion tokens per episode, the run's health, paired comparisons and why methods disagree, the ledger's
rates per stage and, for a run that stopped, how far its build got. ``experiments/bench/cpu_quality.py`` writes
these summaries into its JSON; the other benchmarks and the tests import them from here."""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemis.eval.run_dir import (
    BUILD_SUMMARY_FILE,
    CONFIG_FILE,
    LEDGER_FILE,
    LENIENCY_FILE,
    METRICS_FILE,
    QUESTIONS_FILE,
    RECALL_FILE,
    TIMINGS_FILE,
)

REPO = Path(__file__).resolve().parents[2]  # the source checkout the benchmarks run in (relative paths start here)


PROMPT_TOKEN_TARGET = 2500


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
    graph, else from the ledger (``mnemis.testing.ingest_cost``; calls actually sent only)."""
    from mnemis.testing.ingest_cost import cost_report
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
    from mnemis.data.shard import sharded_address
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
    rows = [json.loads(ln) for ln in (run_dir / QUESTIONS_FILE).read_text().splitlines() if ln.strip()] \
        if (run_dir / QUESTIONS_FILE).is_file() else []
    build = _load(run_dir / BUILD_SUMMARY_FILE)
    ledger = _load(run_dir / LEDGER_FILE)
    config = _load(run_dir / CONFIG_FILE) or {}
    metrics = _load(run_dir / METRICS_FILE)
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
        "accuracy": accuracy(_load(run_dir / METRICS_FILE)),
        "overall_by_judge": overall_by_judge(_load(run_dir / METRICS_FILE)),
        "token_f1": f1_table(rows),
        "evidence_recall": evidence_recall(_load(run_dir / RECALL_FILE)),
        "judge_leniency": leniency(_load(run_dir / LENIENCY_FILE)),
        "memory": shape,
        # full context's truncation to the answer model's window: budget, questions truncated, tokens kept
        "full_context_window": _load(run_dir / "full_context.json"),
        "prompt_tokens": prompt_cost(ledger, shape["episodes"], build),
        "completion_tokens": completion_per_episode(build, shape["episodes"]),
        "health": run_health(run_dir) if status == "complete" else None,
        "paired": paired(rows, metrics) if rows else {},
        "disagreements": why_disagree(rows, metrics) if rows else {},
        "stages": stage_rates(ledger),
        "method_wall_s": _load(run_dir / TIMINGS_FILE),
        # per stage from the log, over every sitting (a resumed or replayed run's ledger holds only its last)
        "logged_stage_wall_s": logged_stage_wall(run_dir / "mnemis.log"),
    }


def question_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The records of a run dir's questions file as plain dicts ([] when there is none)."""
    path = Path(run_dir) / QUESTIONS_FILE
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def variant_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """What an ablation variant is judged on, from its :func:`summarize` summary."""
    health = summary.get("health") or {}
    return {
        "status": summary.get("status"),
        "accuracy": summary.get("overall_by_judge"),
        "token_f1": summary.get("token_f1"),
        "system2": health.get("system2"),
        "route_recall": health.get("recall"),
        "hierarchy": health.get("hierarchy"),
        "memory": summary.get("memory"),
        "evidence_recall": summary.get("evidence_recall"),
        "mnemis_vs_rag": (summary.get("paired") or {}).get("mnemis_vs_rag"),
        "why_mnemis_lost": (summary.get("disagreements") or {}).get("mnemis_vs_rag"),
        "warnings": health.get("warnings"),
    }


def against_paper(rows: dict[str, list[dict[str, Any]]], judges: Sequence[str]) -> dict[str, Any]:
    """Each variant's Mnemis against plain paper mode's Mnemis, question by question (``rows``: variant -> its
    :func:`question_rows`; the variant ``paper`` is the base)."""
    from mnemis.eval.paired import compare_rows

    base = [{**r, "method": "paper"} for r in rows.get("paper", []) if r.get("method") == "mnemis"]
    out = {}
    for name, rs in rows.items():
        if name == "paper" or not base:
            continue
        mine = [{**r, "method": name} for r in rs if r.get("method") == "mnemis"]
        if mine:
            out[f"{name}_vs_paper"] = compare_rows([*mine, *base], name, "paper", judges=judges)
    return out
