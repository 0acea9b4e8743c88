"""Run health: did this run run the method it claims? Read from a run directory's own files.

A first real run produces one number. Whether System-2 contributed to it, whether the base graph is as rich
as the paper's and whether the judge grades like the reference judge must be readable without digging, so
:func:`run_health` computes, from ``traversal.jsonl``, ``recall.json``, ``build_summary.json``,
``hierarchy_metrics.json``, ``leniency.json``, ``ledger.json`` and ``config.json``:

- **System-2**: the share of questions whose selector picked nothing, picked no shortcut (in the released
  code's walk, ``entity_round: false``, entities reach System-2 only through shortcuts), or fell back;
  invented selections; System-2's evidence recall against System-1's;
- **base graph**: names and facts per episode, truncated and failed replies per stage;
- **hierarchy**: layer sizes, stop reason and promotions per group;
- **judges**: leniency on the stress set against the reference judge;
- **model limits** (``ledger.json``): reply budgets clamped to the served model's completion cap or window,
  requests refused as over a limit, schema requests decoded without their schema.

Every file is checked as it is read (:mod:`mnemis.eval.run_files`): a damaged one stops with a
:class:`~mnemis.eval.run_files.RunFileError` naming the file, the record and the field. Each sign that the run did
not run the paper's method is a warning line. ``health.json`` holds the figures
and the warnings; the report opens with them (:func:`health_lines`); ``mnemis doctor`` and
``experiments/bench/gpu_smoke.sh`` point here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mnemis.eval.run_dir import (
    BUILD_SUMMARY_FILE,
    CONFIG_FILE,
    HEALTH_FILE,
    HIERARCHY_METRICS_FILE,
    LEDGER_FILE,
    LENIENCY_FILE,
    RECALL_FILE,
    TRAVERSAL_FILE,
)
from mnemis.eval.run_files import (
    BuildSummary,
    LeniencyFile,
    RunFileError,
    hierarchy_file,
    ledger_file,
    read_json,
    read_jsonl,
    recall_file,
)

# thresholds of the warning lines (shares of questions, ratios of recalls, acceptance rates)
PICKED_NOTHING = 0.5      # System-2 picked nothing for more than half the questions
NO_SHORTCUT = 0.5         # (entities only through shortcuts) no shortcut for more than half
FALLBACK = 0.2            # System-2 fell back to System-1 for more than a fifth
S2_RECALL_RATIO = 0.5     # System-2's direct evidence recall below half of System-1's
MIN_FACTS_PER_EPISODE = 0.5
TRUNCATED = 0.01          # more than 1% of a stage's replies cut at max_tokens
PROMOTED = 0.5            # more than half the category nodes are lower nodes promoted unchanged
TOP_LAYER_NODES = 100     # a top layer this large makes one very long selection prompt
LENIENCY_GAP = 0.25       # acceptance rate this far from the reference generous judge's
MOSTLY_ACCEPTS = 0.8      # a judge that accepts most known-wrong answers: its accuracy is not meaningful
PAPER_TABLE3_PROMPT_TOKENS = 6600  # the paper's base-graph prompt tokens per LoCoMo episode (Table 3, GPT-4.1-mini)


def _share(n: int, total: int) -> float | None:
    return n / total if total else None


# ------------------------------------------------------------------------------------------- System-2
def system2_health(traversals: list[dict[str, Any]], entity_round: bool | None) -> dict[str, Any]:
    """Shares of questions whose walk picked nothing, took no shortcut, fell back; invented selections."""
    n = len(traversals)
    reasons = Counter(t.get("fallback") for t in traversals if t.get("fallback"))
    picked_nothing = sum(1 for t in traversals
                         if not any(r.get("selected") or r.get("flagged") for r in t.get("rounds") or []))
    no_shortcut = sum(1 for t in traversals if not any(r.get("flagged") for r in t.get("rounds") or []))
    with_entities = sum(1 for t in traversals if (t.get("counts") or {}).get("entities", 0) > 0
                        and not t.get("fallback"))
    rounds = [len(t.get("rounds") or []) for t in traversals]
    return {
        "questions": n,
        "entity_round": entity_round,
        "picked_nothing": _share(picked_nothing, n),
        "no_shortcut": _share(no_shortcut, n),
        "fell_back": _share(sum(reasons.values()), n),
        "fallback_reasons": dict(reasons),
        "with_context": _share(with_entities, n),
        "mean_rounds": sum(rounds) / n if n else None,
        "invented_selections": sum(r.get("invented", 0) for t in traversals for r in t.get("rounds") or []),
        # window paging: the most prompts one round of one question took, pages split again after the engine
        # rejected them as too long, and prompts that still did not fit
        "max_prompts_per_round": max((r.get("prompts", 0) for t in traversals for r in t.get("rounds") or []),
                                     default=0),
        "resplit_pages": sum(r.get("resplit", 0) for t in traversals for r in t.get("rounds") or []),
        "too_long_prompts": sum(r.get("too_long", 0) for t in traversals for r in t.get("rounds") or []),
    }


def _recall(recall: Mapping[str, Any], route: str) -> float | None:
    cell = (recall.get(route) or {}).get("overall") or {}
    value = cell.get("direct")
    return float(value) if isinstance(value, (int, float)) else None


def route_recall(recall: Mapping[str, Any]) -> dict[str, float | None]:
    """Direct evidence recall of Mnemis' routes and RAG (``recall.json``)."""
    return {route: _recall(recall, route) for route in ("mnemis/system1", "mnemis/system2", "mnemis/fused", "rag")
            if route in recall}


# ------------------------------------------------------------------------------------------ base graph
def base_graph_health(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Names, facts, truncated and failed replies per episode, from the build's cumulative counters."""
    totals = summary.get("ingest_totals") or {}
    stages = summary.get("stages") or {}
    if not totals and isinstance(stages.get("base_graph"), Mapping):
        totals = stages["base_graph"].get("totals") or stages["base_graph"].get("counters") or {}
    counts = summary.get("store_counts") or {}
    episodes = sum(int((c or {}).get("episodes", 0)) for c in counts.values()) if counts else 0
    if not totals or not episodes:
        return {}
    calls = {k.removeprefix("calls."): v for k, v in totals.items() if k.startswith("calls.")}
    truncated = {k.removeprefix("truncated."): v for k, v in totals.items() if k.startswith("truncated.") and v}
    failed = {k.removeprefix("skip.failed_reply."): v for k, v in totals.items()
              if k.startswith("skip.failed_reply.") and v}
    prompt = sum(v for k, v in totals.items() if k.startswith("tokens.prompt."))
    completion = sum(v for k, v in totals.items() if k.startswith("tokens.completion."))
    return {
        "episodes": episodes,
        "names_per_episode": totals.get("extracted.names", 0) / episodes,
        "facts_per_episode": totals.get("extracted.facts", 0) / episodes,
        "prompt_tokens_per_episode": prompt / episodes,
        "completion_tokens_per_episode": completion / episodes,
        "truncated": {s: {"replies": v, "share": _share(v, calls.get(s, 0))} for s, v in truncated.items()},
        "failed": failed,
    }


# ------------------------------------------------------------------------------------------- hierarchy
def hierarchy_health(hierarchy: Any) -> dict[str, Any]:
    """Per group: layer sizes (entities first), stop reason, promoted categories."""
    rows = hierarchy if isinstance(hierarchy, list) else (
        list(hierarchy.values()) if isinstance(hierarchy, Mapping) and "group_id" not in hierarchy else [hierarchy])
    out = {}
    for r in rows:
        if isinstance(r, Mapping) and "nodes_per_layer" in r:
            out[str(r.get("group_id", len(out)))] = {
                "nodes_per_layer": list(r.get("nodes_per_layer") or []), "stop_reason": r.get("stop_reason", ""),
                "promoted": r.get("promoted", 0), "layers": r.get("layers", 0),
                "empty_replies": (r.get("repairs") or {}).get("empty_replies", 0), "llm_calls": r.get("llm_calls")}
    return out


# -------------------------------------------------------------------------------------- model limits
LIMIT_COUNTERS = ("clamped", "clamped_cut", "over_limit", "unconstrained")


def limits_health(ledger: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Per stage (summed over methods): requests whose budget the model's limits clamped, clamped replies cut at
    that budget, requests refused as over a limit, schema requests decoded without their schema (``ledger.json``;
    :mod:`mnemis.models.llm.limits`). Only stages with one of them."""
    ledgers = [ledger] if "stages" in ledger else [v for v in ledger.values() if isinstance(v, Mapping)]
    out: dict[str, Counter] = {}
    for led in ledgers:
        for stage, c in (led.get("stages") or {}).items():
            row = out.setdefault(stage, Counter())
            for key in ("calls", *LIMIT_COUNTERS):
                row[key] += int((c or {}).get(key) or 0)
    return {s: dict(c) for s, c in sorted(out.items()) if any(c[k] for k in LIMIT_COUNTERS)}


def _limit_warnings(limits: Mapping[str, Mapping[str, int]]) -> list[str]:
    out = []
    for stage, c in limits.items():
        if c.get("over_limit"):
            out.append(f"{c['over_limit']} {stage} requests asked for more than the model's completion cap or window "
                       "and were refused: they have no reply")
        if c.get("unconstrained"):
            out.append(f"{c['unconstrained']} {stage} requests were decoded without their JSON schema: the server "
                       "refused response_format json_schema (llm.backend.response_format=json_schema_only stops "
                       "instead)")
        if c.get("clamped_cut"):
            out.append(f"{c['clamped_cut']} of the {c['clamped']} {stage} replies whose budget the model's limits "
                       "clamped stopped at that budget (their complete items kept)")
    return out


# ---------------------------------------------------------------------------------------------- judges
def judge_health(leniency: Mapping[str, Any]) -> dict[str, Any]:
    """Per judge: acceptance of known-wrong answers by kind, beside the reference generous judge's."""
    from mnemis.eval.leniency import REFERENCE_RATES

    out = {}
    criteria = leniency.get("criteria") or {}
    for name, kinds in (leniency.get("judges") or {}).items():
        rates = {k: (v or {}).get("rate") for k, v in kinds.items() if isinstance(v, Mapping)}
        judged = sum(int((v or {}).get("judged") or 0) for v in kinds.values() if isinstance(v, Mapping))
        accepted = sum(int((v or {}).get("accepted") or 0) for v in kinds.values() if isinstance(v, Mapping))
        out[name] = {"criterion": criteria.get(name), "rates": rates, "reference": dict(REFERENCE_RATES),
                     "accepts": _share(accepted, judged)}  # of every known-wrong answer judged, both kinds
    return out


def _mostly_accepts(rates: Mapping[str, float | None]) -> bool:
    return any(r is not None and r > MOSTLY_ACCEPTS for r in rates.values())


def not_meaningful(health: Mapping[str, Any]) -> dict[str, str]:
    """Per judge that accepts most known-wrong answers of a kind (above ``MOSTLY_ACCEPTS``): the line that says
    its accuracy is not meaningful. The CLI's closing lines and the report then put token F1 first."""
    out = {}
    for name, j in (health.get("judges") or {}).items():
        rates = j.get("rates") or {}
        if _mostly_accepts(rates):
            share = j.get("accepts")
            if share is None:  # a health.json without the pooled share: the most lenient kind
                share = max(r for r in rates.values() if r is not None)
            kinds = ", ".join(f"{k} {_pct(r)}" for k, r in rates.items())
            out[name] = f"accuracy not meaningful: judge {name} accepts {_pct(share)} of known-wrong answers ({kinds})"
    return out


# --------------------------------------------------------------------------------------------- warnings
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def warnings(h: Mapping[str, Any]) -> list[str]:
    """One line per sign that the run did not run the paper's method (or cannot be read as it)."""
    out = []
    s2 = h.get("system2") or {}
    if s2.get("questions"):
        if (s2.get("picked_nothing") or 0) > PICKED_NOTHING:
            out.append(f"System-2 picked nothing for {_pct(s2['picked_nothing'])} of the questions: its route added "
                       "nothing there (the selector model or the hierarchy is the first suspect)")
        if s2.get("entity_round") is False and (s2.get("no_shortcut") or 0) > NO_SHORTCUT:
            out.append(f"{_pct(s2['no_shortcut'])} of the questions took no shortcut: with no entity round, entities, "
                       "facts and episodes reach System-2 only through shortcut subtrees, so System-2 mostly added "
                       "category nodes")
        if (s2.get("fell_back") or 0) > FALLBACK:
            out.append(f"System-2 fell back to System-1 for {_pct(s2['fell_back'])} of the questions "
                       f"({', '.join(f'{k} {v}' for k, v in s2['fallback_reasons'].items())})")
    rec = h.get("recall") or {}
    s1r, s2r = rec.get("mnemis/system1"), rec.get("mnemis/system2")
    if s1r is not None and s2r is not None and s1r > 0 and s2r < S2_RECALL_RATIO * s1r:
        out.append(f"System-2's direct evidence recall is {s2r:.3f} against System-1's {s1r:.3f}: the fused "
                   "context is mostly System-1's")
    bg = h.get("base_graph") or {}
    if bg:
        if bg.get("facts_per_episode", 0) < MIN_FACTS_PER_EPISODE:
            out.append(f"the base graph holds {bg['facts_per_episode']:.2f} facts per episode: a thin graph starves "
                       "System-1's graph route and System-2's expansion")
        for stage, t in (bg.get("truncated") or {}).items():
            if (t.get("share") or 0) > TRUNCATED:
                out.append(f"{_pct(t['share'])} of the {stage} replies were cut at max_tokens ({t['replies']})")
        for stage, n in (bg.get("failed") or {}).items():
            out.append(f"{n} {stage} replies failed (schema or transport) and were skipped")
    for gid, g in (h.get("hierarchy") or {}).items():
        sizes = g.get("nodes_per_layer") or []
        if len(sizes) <= 2:
            out.append(f"group {gid}: the hierarchy has {max(len(sizes) - 1, 0)} category layer(s) "
                       f"(stop: {g.get('stop_reason') or 'n/a'}); the walk has little to choose from")
        elif sizes[-1] > TOP_LAYER_NODES:
            out.append(f"group {gid}: {sizes[-1]} nodes in the top layer make one very long selection prompt")
        made = sum(sizes[1:])
        if made and (g.get("promoted") or 0) > PROMOTED * made:
            out.append(f"group {gid}: {g['promoted']} of the {made} category nodes are lower nodes promoted unchanged "
                       f"({g.get('empty_replies') or 0} categorisation replies assigned nothing): the categoriser "
                       "grouped almost nothing")
    out += _limit_warnings(h.get("limits") or {})
    for name, j in (h.get("judges") or {}).items():
        rates = j.get("rates") or {}
        if _mostly_accepts(rates):
            out.append(f"judge {name} accepts {', '.join(f'{_pct(r)} of {k}' for k, r in rates.items())} known-wrong "
                       "answers: its accuracy is not meaningful; read token F1 first")
        elif j.get("criterion") == "generous":
            gaps = [k for k, r in rates.items() if r is not None and k in j["reference"]
                    and abs(r - j["reference"][k]) > LENIENCY_GAP]
            if gaps:
                ref = j["reference"]
                got = ", ".join(f"{_pct(rates[k])} of {k}" for k in gaps)
                out.append(f"judge {name} (generous) accepts {got} known-wrong answers; the reference judge "
                           f"accepts {', '.join(_pct(ref[k]) for k in gaps)}")
    return out


def run_health(run_dir: str | Path) -> dict[str, Any]:
    """The health figures and warnings of a run directory (every part optional: what is there is read)."""
    from mnemis.retrieve.system2_records import Traversal

    run = Path(run_dir)
    cfg = read_json(run / CONFIG_FILE) or {}
    if not isinstance(cfg, Mapping):
        raise RunFileError(f"{run / CONFIG_FILE}: expected a JSON object, got {type(cfg).__name__}")
    s2cfg = ((cfg.get("retrieval") or {}).get("system2") or {})
    health: dict[str, Any] = {"fidelity": cfg.get("fidelity")}
    traversals = [t.model_dump(mode="json") for t in read_jsonl(run / TRAVERSAL_FILE, Traversal)]
    if traversals:
        health["system2"] = system2_health(traversals, s2cfg.get("entity_round"))
    recall = read_json(run / RECALL_FILE)
    if recall is not None:
        health["recall"] = route_recall(recall_file(recall, str(run / RECALL_FILE)))
    summary = read_json(run / BUILD_SUMMARY_FILE, BuildSummary)
    if summary is not None:
        bg = base_graph_health(summary.model_dump(mode="json"))
        if bg:
            bg["paper_table3_prompt_tokens_per_episode"] = PAPER_TABLE3_PROMPT_TOKENS
            health["base_graph"] = bg
    hierarchy = read_json(run / HIERARCHY_METRICS_FILE)
    if hierarchy:
        health["hierarchy"] = hierarchy_health(hierarchy_file(hierarchy, str(run / HIERARCHY_METRICS_FILE)))
    ledger = read_json(run / LEDGER_FILE)
    if ledger is not None:
        health["limits"] = limits_health(ledger_file(ledger, str(run / LEDGER_FILE)))
    leniency = read_json(run / LENIENCY_FILE, LeniencyFile)
    if leniency is not None:
        health["judges"] = judge_health(leniency.model_dump(mode="json"))
    health["warnings"] = warnings(health)
    return health


def write_health(run_dir: str | Path) -> dict[str, Any]:
    """Compute :func:`run_health` and write it to ``health.json`` in the run directory."""
    health = run_health(run_dir)
    (Path(run_dir) / HEALTH_FILE).write_text(json.dumps(health, indent=2), encoding="utf-8")
    return health


def health_lines(health: Mapping[str, Any]) -> list[str]:
    """The report's "Run health" section: warnings first, then the figures they come from."""
    lines = ["## Run health", ""]
    warns = health.get("warnings") or []
    lines += [f"- **warning**: {w}" for w in warns] or ["- no warning: every check below is within its bound"]
    lines.append("")
    s2 = health.get("system2")
    if s2:
        lines.append(f"System-2 over {s2['questions']} questions: picked nothing {_pct(s2['picked_nothing'])}, no "
                     f"shortcut {_pct(s2['no_shortcut'])}, fell back {_pct(s2['fell_back'])}, a context with nodes "
                     f"{_pct(s2['with_context'])}, {s2['mean_rounds']:.1f} rounds on average, "
                     f"{s2['invented_selections']} invented selections.")
    rec = health.get("recall")
    if rec:
        lines.append("Direct evidence recall: " + ", ".join(
            f"{k} {v:.3f}" if v is not None else f"{k} n/a" for k, v in rec.items()) + ".")
    bg = health.get("base_graph")
    if bg:
        lines.append(f"Base graph: {bg['names_per_episode']:.2f} names and {bg['facts_per_episode']:.2f} facts per "
                     f"episode over {bg['episodes']} episodes; {bg['prompt_tokens_per_episode']:.0f} prompt and "
                     f"{bg['completion_tokens_per_episode']:.0f} completion tokens per episode (the paper's Table 3: "
                     f"about {bg['paper_table3_prompt_tokens_per_episode']:,} prompt tokens per LoCoMo episode).")
    clamped = {st: c for st, c in (health.get("limits") or {}).items() if c.get("clamped")}
    if clamped:
        lines.append("Reply budgets clamped to the model's limits (its completion cap, or its window less the "
                     "prompt; the stage's worst case was larger): " + ", ".join(
                         f"{st} {c['clamped']} of {c['calls']}" for st, c in clamped.items()) + ".")
    for gid, g in (health.get("hierarchy") or {}).items():
        lines.append(f"Hierarchy of {gid}: nodes per layer {g['nodes_per_layer']} (entities first), stop "
                     f"{g['stop_reason'] or 'n/a'}, {g['promoted']} promoted, "
                     f"{g.get('empty_replies', 0)} categorisation replies with no assignment.")
    return lines + [""]
