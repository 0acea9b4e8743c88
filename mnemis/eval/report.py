"""Regenerate ``report.md`` and PNG plots from the files of a run dir (nothing else is read).

Inputs (all optional except one of the first two): ``questions.jsonl`` (records), ``metrics.json``
(``{method: compute_metrics(...)}``; recomputed from the records when absent), ``ledger.json``
(``Ledger.to_dict()`` or ``{method: Ledger.to_dict()}``), ``leniency.json`` (``judge_leniency``),
``roles.json`` (which model answers, selects and judges, with each judge's criterion; ``mnemis.app.jobs``),
``recall.json`` (``{route: {"recall@10": x, "mrr": y, ...}}``, optionally nested under a method),
``hierarchy_metrics.json`` (a dict, or a list of per-group dicts).
Outputs: ``report.md``, ``accuracy.png``, ``recall.png`` (if recall), ``cost.png`` (if ledger). Every file is
checked as it is read (:mod:`mnemis.eval.run_files`): a damaged one stops the report with a
:class:`~mnemis.eval.run_files.RunFileError` naming the file, the record and the field, after ``report.html`` has
been written from the valid records.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mnemis.eval.explorer import write_html
from mnemis.eval.metrics import metrics_by_method, order_categories
from mnemis.eval.records import read_records
from mnemis.eval.run_dir import (
    HIERARCHY_METRICS_FILE,
    HTML_FILE,
    LEDGER_FILE,
    LENIENCY_FILE,
    METRICS_FILE,
    QUESTIONS_FILE,
    RECALL_FILE,
    REPORT_FILE,
    ROLES_FILE,
)
from mnemis.eval.run_files import (
    LeniencyFile,
    RolesFile,
    RunFileError,
    hierarchy_file,
    ledger_file,
    metrics_file,
    read_json,
    recall_file,
)

_RECALL_K = re.compile(r"recall@(\d+)$")


def _load(run: Path, name: str, read: Any = None) -> Any:
    """The checked content of ``run / name`` as plain values (None when missing): ``read`` is a pydantic model or a
    ``(value, where)`` checker of :mod:`mnemis.eval.run_files`."""
    path = run / name
    if isinstance(read, type):
        value = read_json(path, read)
        return None if value is None else value.model_dump(mode="json")
    value = read_json(path)
    return value if value is None or read is None else read(value, str(path))


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _cell(c: Mapping[str, Any] | None) -> str:
    if not c or c.get("accuracy") is None:
        return "–"
    ci = c.get("ci")
    s = _pct(c["accuracy"])
    if ci and ci[0] is not None:
        s += f" [{_pct(ci[0])}, {_pct(ci[1])}]"
    return s


def _leniency_str(len_judges: Mapping[str, Any], judge: str) -> str:
    j = len_judges.get(judge)
    if not j:
        return "–"
    return " / ".join(_pct((j.get(k) or {}).get("rate")) for k in ("wrong_specific", "wrong_vague"))


def _num(v: float | None, key: str = "") -> str:
    if v is None:
        return "–"
    return str(int(v)) if key in ("n", "skipped", "total", "count") else f"{v:.3f}"


def _recall_leaves(obj: Any, prefix: str = "") -> dict[str, dict[str, float]]:
    """Flatten nested recall dicts to ``{label: {metric: value}}`` (leaves = dicts of numbers)."""
    if not isinstance(obj, Mapping):
        return {}
    nums = {k: float(v) for k, v in obj.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out: dict[str, dict[str, float]] = {prefix or "all": nums} if nums else {}
    for k, v in obj.items():
        if isinstance(v, Mapping):
            out.update(_recall_leaves(v, f"{prefix}/{k}" if prefix else str(k)))
    return out


def _judge_label(judge: str, m: Mapping[str, Any], roles: Mapping[str, Any]) -> str:
    spec = next((j for j in roles.get("judges", []) if j.get("name") == judge), None)
    label = judge + (f" ({spec['criterion']})" if spec else "")
    if m.get("headline_judge") == judge:
        label = f"**{label}** headline"
    if spec and spec.get("self_judged"):
        label += " [self-judged]"
    return label


def _roles_section(roles: Mapping[str, Any]) -> list[str]:
    if not roles:
        return []
    lines = ["## Models by role", "", "| role | model |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in (roles.get("roles") or {}).items()]
    for m, key in (roles.get("answer_prompts") or {}).items():
        lines.append(f"| answer prompt ({m}) | {key} |")
    for j in roles.get("judges", []):
        mark = " (headline)" if j.get("name") == roles.get("headline_judge") else ""
        lines.append(f"| judge {j['name']}{mark}, criterion {j['criterion']} | {j['model']} via `{j['slot']}` |")
    lines.append("")
    selfj = [j["name"] for j in roles.get("judges", []) if j.get("self_judged")]
    if selfj:
        lines += [f"**Self-judged:** judge {', '.join(selfj)} is the model under test (the same model answers "
                  "and grades), so its scores are not comparable with scores from an independent judge"
                  + (" (the paper's judge was GPT-4.1-mini)." if roles.get("fidelity") == "paper" else "."), ""]
    return lines


def _score_cell(c: Mapping[str, Any] | None, key: str) -> str:
    return "–" if not c or c.get(key) is None else f"{100 * c[key]:.1f}"


def _answer_scores_section(metrics: dict[str, Any]) -> list[str]:
    from mnemis.eval.answer_scores import SCORES

    rows = [(m, t) for m, x in metrics.items() if (t := x.get("answer_scores"))]
    if not rows:
        return []
    cats = order_categories({c for _, t in rows for c in t["by_category"]})
    seps = order_categories({c for _, t in rows for c in t["separate"]})
    head = ["method", "score", *cats, "overall", *seps]
    lines = ["## Answer scores without a judge (%: token F1, BLEU-1, LoCoMo F1)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, t in rows:
        for k in SCORES:
            lines.append("| " + " | ".join([m, k, *(_score_cell(t["by_category"].get(c), k) for c in cats),
                                            "**" + _score_cell(t["overall"], k) + "**",
                                            *(_score_cell(t["separate"].get(c), k) for c in seps)]) + " |")
    lines += ["", "f1 and bleu1 as the Mem0 evaluation computes them, locomo_f1 as the LoCoMo paper's "
              "(mnemis.eval.answer_scores).", ""]
    seeds = [(m, x["answer_scores_seeds"]) for m, x in metrics.items() if x.get("answer_scores_seeds")]
    if seeds:
        lines += ["| method | seeds | " + " | ".join(SCORES) + " |", "|---|---|" + "---|" * len(SCORES)]
        for m, s in seeds:
            cells = [f"{_pct(s['overall'][k]['mean'])} ± {_pct(s['overall'][k]['std'])}" for k in SCORES]
            lines.append(f"| {m} | {len(s['seeds'])} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _accuracy_section(metrics: dict[str, Any], leniency: Mapping[str, Any],
                      roles: Mapping[str, Any] | None = None, lenient: Mapping[str, str] | None = None) -> list[str]:
    """The judges' accuracy, opened by a line per judge whose accuracy is not meaningful (``lenient``)."""
    roles = roles or {}
    cats: list[str] = []
    seps: list[str] = []
    for m in metrics.values():
        for j in m.get("judges", {}).values():
            cats += list(j["raw"]["by_category"])
            seps += list(j["raw"]["separate"])
    cats, seps = order_categories(cats), order_categories(seps)
    head = ["method", "judge", "scoring", *cats, "overall", *seps, "judge failures", "leniency spec/vague %"]
    lines = ["## Accuracy (%, 95% bootstrap CI by group)", ""]
    lines += [f"- **{line}**" for line in (lenient or {}).values()]
    lines += [""] * bool(lenient) + ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, m in metrics.items():
        for judge, j in m.get("judges", {}).items():
            for scoring in ("raw", "audited"):
                t = j.get(scoring)
                if not t:
                    continue
                row = [method, _judge_label(judge, m, roles),
                       scoring + (f" ({t['n_changed']} changed)" if "n_changed" in t else ""),
                       *(_cell(t["by_category"].get(c)) for c in cats), "**" + _cell(t["overall"]) + "**",
                       *(_cell(t["separate"].get(c)) for c in seps), str(t.get("judge_failures", 0)),
                       _leniency_str(leniency, judge)]
                lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Overall excludes " + (", ".join(seps) if seps else "nothing")
              + "; separately reported categories count declining answers as correct.", ""]
    seeds = [(mth, jn, j["seed_summary"]) for mth, m in metrics.items() for jn, j in m.get("judges", {}).items()
             if "seed_summary" in j]
    if seeds:
        cats_s = order_categories({c for _, _, s in seeds for c in s["by_category"]})
        lines += ["### Repeated runs (accuracy %, mean ± std over seeds)", "",
                  "| method | judge | seeds | " + " | ".join(cats_s) + " | overall |",
                  "|---|---|---|" + "---|" * (len(cats_s) + 1)]
        for mth, jn, s in seeds:
            o = s["overall"]
            cells = [f"{_pct(s['by_category'][c]['mean'])} ± {_pct(s['by_category'][c]['std'])}"
                     if c in s["by_category"] else "–" for c in cats_s]
            lines.append(f"| {mth} | {jn} | {len(s['seeds'])} | " + " | ".join(cells)
                         + f" | {_pct(o['mean'])} ± {_pct(o['std'])} |")
        lines.append("")
    agree = [(mth, pair, a) for mth, m in metrics.items() for pair, a in (m.get("agreement") or {}).items()]
    if agree:
        lines += ["### Judge agreement", "", "| method | judges | n | agreement | Cohen's kappa |", "|---|---|---|---|---|"]
        for mth, pair, a in agree:
            kappa = "–" if a.get("kappa") is None else f"{a['kappa']:.3f}"
            lines.append(f"| {mth} | {pair.replace('|', ' vs ')} | {a['n']} | {_pct(a.get('agreement'))} | {kappa} |")
        lines.append("")
    return lines


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> bool:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot_accuracy(metrics: dict[str, Any], path: Path) -> bool:
    plt = _pyplot()
    import numpy as np

    series = []
    for method, m in metrics.items():
        judges = m.get("judges", {})
        if not judges:
            continue
        judge = m.get("headline_judge") if m.get("headline_judge") in judges else next(iter(judges))
        j = judges[judge]
        t = j["raw"]
        cells = {**t["by_category"], **t["separate"], "overall": t["overall"]}
        series.append((f"{method} ({judge})", cells))
    if not series:
        return False
    cats = order_categories({c for _, cells in series for c in cells if c != "overall"}) + ["overall"]
    x = np.arange(len(cats))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(cats)), 4))
    for i, (label, cells) in enumerate(series):
        acc = [100 * (cells.get(c) or {}).get("accuracy") if (cells.get(c) or {}).get("accuracy") is not None
               else 0.0 for c in cats]
        err = [[], []]
        for c, a in zip(cats, acc):
            ci = (cells.get(c) or {}).get("ci") or [None, None]
            err[0].append(max(0.0, a - 100 * ci[0]) if ci[0] is not None else 0.0)
            err[1].append(max(0.0, 100 * ci[1] - a) if ci[1] is not None else 0.0)
        ax.bar(x + (i - (len(series) - 1) / 2) * width, acc, width, yerr=err, capsize=3, label=label)
    ax.set_xticks(x, cats, rotation=20, ha="right")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title("Accuracy per category (95% bootstrap CI)")
    return _save(plt, fig, path)


def _plot_recall(leaves: dict[str, dict[str, float]], path: Path) -> bool:
    plt = _pyplot()

    curves = {}
    overall = {k: v for k, v in leaves.items() if k == "overall" or k.endswith("/overall")}
    for label, vals in (overall or leaves).items():
        pts = sorted((int(m.group(1)), v) for k, v in vals.items() if (m := _RECALL_K.search(k)))
        if pts:
            curves[label] = pts
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    styles = [("-", "o", 9), ("--", "s", 7), (":", "^", 6), ("-.", "D", 4)]  # equal curves stay visible
    for i, (label, pts) in enumerate(curves.items()):
        line, marker, size = styles[i % len(styles)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=line, marker=marker, markersize=size,
                label=label)
    ax.set_xlabel("k")
    ax.set_ylabel("evidence recall@k")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("Evidence recall per route")
    return _save(plt, fig, path)


def _plot_cost(ledgers: dict[str, Any], path: Path) -> bool:
    plt = _pyplot()

    rows = [(f"{m}:{s}" if len(ledgers) > 1 else s, st) for m, led in ledgers.items()
            for s, st in led.get("stages", {}).items()]
    if not rows:
        return False
    labels = [r[0] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(8, 0.9 * len(rows) + 4), 4))
    pt = [r[1].get("prompt_tokens", 0) for r in rows]
    ct = [r[1].get("completion_tokens", 0) for r in rows]
    a1.bar(labels, pt, label="prompt")
    a1.bar(labels, ct, bottom=pt, label="completion")
    a1.set_ylabel("tokens")
    a1.set_title("Tokens per stage")
    a1.legend(fontsize=8)
    a2.bar(labels, [r[1].get("wall_s", 0.0) for r in rows], color="tab:green")
    a2.set_ylabel("seconds")
    a2.set_title("Wall time per stage")
    for ax in (a1, a2):
        ax.tick_params(axis="x", rotation=30)
        for t in ax.get_xticklabels():
            t.set_ha("right")
    return _save(plt, fig, path)


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _hierarchy_section(h: Any) -> list[str]:
    lines = ["## Hierarchy", ""]
    rows = h if isinstance(h, list) else [h]
    rows = [r for r in rows if isinstance(r, Mapping)]
    keys: list[str] = []
    for r in rows:
        keys += [k for k, v in _flat(r).items() if not isinstance(v, (list, dict)) and k not in keys]
    keys = keys[:12]
    lines += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        f = _flat(r)
        lines.append("| " + " | ".join(f"{f[k]:.3g}" if isinstance(f.get(k), float) else str(f.get(k, ""))
                                       for k in keys) + " |")
    return lines + [""]


def _graded_lines(run: Path, metrics: Mapping[str, Any], qfile: Path) -> list[str]:
    from mnemis.eval.graded_report import graded_section, health_section

    lines = graded_section(run, metrics)
    if lines and qfile.is_file():
        lines += health_section(read_records(qfile))
    return lines


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.md``, its plots and ``report.html`` (:mod:`mnemis.eval.explorer`) into ``run_dir`` from
    its files; returns the report path. A damaged file raises ``RunFileError`` (the page is written first)."""
    run = Path(run_dir)
    try:
        return _write_report(run)
    except RunFileError as exc:
        write_html(run)  # the explorer shows every valid record and names the damaged ones
        raise RunFileError(f"{exc}\n(report.md not written; {run / HTML_FILE} shows the valid records)") \
            from None


def _write_report(run: Path) -> Path:
    metrics = _load(run, METRICS_FILE, metrics_file)
    qfile = run / QUESTIONS_FILE
    if metrics is None:
        if not qfile.is_file():
            raise FileNotFoundError(f"{run} has neither metrics.json nor {QUESTIONS_FILE}")
        metrics = metrics_by_method(read_records(qfile))
    len_file = _load(run, LENIENCY_FILE, LeniencyFile) or {}
    leniency = len_file.get("judges", {})
    criteria = len_file.get("criteria", {})
    roles = _load(run, ROLES_FILE, RolesFile) or {}
    ledgers = _load(run, LEDGER_FILE, ledger_file) or {}
    recall = _recall_leaves(_load(run, RECALL_FILE, recall_file) or {})
    hierarchy = _load(run, HIERARCHY_METRICS_FILE, hierarchy_file)

    lines = [f"# Mnemis run report: {run.name}", ""]
    for method, m in metrics.items():
        lines.append(f"- **{method}**: {m.get('n_questions', '?')} questions in {m.get('n_groups', '?')} groups, "
                     f"{m.get('answer_failures', 0)} failed answers, seeds {m.get('seeds', [0])}")
    lines.append("")
    from mnemis.eval.run_health import health_lines, not_meaningful, write_health

    health = write_health(run)
    lines += health_lines(health)  # did the run run the method it claims? (health.json)
    lines += _roles_section(roles)
    lenient = not_meaningful(health)  # a judge that accepts most known-wrong answers: token F1 first
    scores = _answer_scores_section(metrics)
    accuracy = _accuracy_section(metrics, leniency, roles, lenient)
    lines += scores + accuracy if lenient and scores else accuracy + scores
    lines += _graded_lines(run, metrics, qfile)  # BEAM / LoCoMo-Plus: score parts, controls, health per ability
    if _plot_accuracy(metrics, run / "accuracy.png"):
        lines += ["![accuracy](accuracy.png)", ""]
    if leniency:
        lines += ["## Judge leniency (acceptance of known-wrong answers, %)", "",
                  "| judge | criterion | wrong_specific | wrong_vague | judged | failures |", "|---|---|---|---|---|---|"]
        for judge, j in leniency.items():
            ws, wv = j.get("wrong_specific") or {}, j.get("wrong_vague") or {}
            lines.append(f"| {judge} | {criteria.get(judge, '–')} | {_pct(ws.get('rate'))} | {_pct(wv.get('rate'))} | "
                         f"{ws.get('judged', 0) + wv.get('judged', 0)} | {ws.get('failures', 0) + wv.get('failures', 0)} |")
        lines += ["| reference generous judge (gpt-4o-mini, Mem0 prompt) | generous | 10.6 | 62.8 | 3080 | – |", "",
                  "A judge's leniency is the share of known-wrong answers it accepts: `wrong_specific` shifts every "
                  "fact, `wrong_vague` stays on topic but commits to nothing. Compare each judge with the reference "
                  "row before comparing its accuracy with published numbers.", ""]
    if recall:
        metric_names = list(dict.fromkeys(k for v in recall.values() for k in v))
        lines += ["## Retrieval (evidence recall)", "", "| route | " + " | ".join(metric_names) + " |",
                  "|" + "---|" * (len(metric_names) + 1)]
        for label, vals in recall.items():
            lines.append(f"| {label} | " + " | ".join(_num(vals.get(k), k) for k in metric_names) + " |")
        lines.append("")
        if _plot_recall(recall, run / "recall.png"):
            lines += ["![recall](recall.png)", ""]
    if ledgers:
        lines += ["## Cost per stage", "", "| ledger | stage | calls | prompt tokens | completion tokens | cache hits "
                  "| failures | wall s |", "|---|---|---|---|---|---|---|---|"]
        for name, led in ledgers.items():
            for stage, s in {**led.get("stages", {}), "TOTAL": led.get("total", {})}.items():
                if not s:
                    continue
                lines.append(f"| {name} | {stage} | {s.get('calls', 0)} | {s.get('prompt_tokens', 0)} | "
                             f"{s.get('completion_tokens', 0)} | {s.get('cache_hits', 0)} | {s.get('failures', 0)} | "
                             f"{s.get('wall_s', 0.0):.1f} |")
        lines.append("")
        if _plot_cost(ledgers, run / "cost.png"):
            lines += ["![cost](cost.png)", ""]
    if hierarchy:
        lines += _hierarchy_section(hierarchy)
    lines += ["## Explore", "", "Per-question drill-down, System-2 walks and the hierarchy: [report.html](report.html) "
              "(one self-contained page; open it in a browser).", ""]
    out = run / REPORT_FILE
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_html(run)
    return out
