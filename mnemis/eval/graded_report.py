"""The report's section on graded scores (BEAM, LoCoMo-Plus cognitive): what ``report.md`` adds beside the
per-category score table when a run has graded questions.

Per method and judge, per category: the score's parts (rubric mean with the judge's 0.5 kept and floored;
event ordering's tau_norm, F1, precision, recall; cognitive labels), the value BEAM's own report script
would give (``upstream``), and the judge failures; then the graded judges' controls
(``graded_leniency.json``), questions of a type no scorer knows (counted, never scored) and the run-health
flags per category (questions whose retrieval or answer raised a flag).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mnemis.eval.metrics import order_categories
from mnemis.eval.run_dir import GRADED_LENIENCY_FILE

PARTS = ("rubric_mean", "rubric_mean_floor", "tau_norm", "f1", "precision", "recall", "upstream")


def _f(x: Any) -> str:
    return "–" if not isinstance(x, (int, float)) else f"{100 * x:.1f}"


def graded_section(run: Path, metrics: Mapping[str, Any]) -> list[str]:
    """Markdown lines (empty when no method has graded scores)."""
    rows = [(m, j, jd["graded"]) for m, mm in metrics.items() for j, jd in (mm.get("judges") or {}).items()
            if jd.get("graded")]
    lines: list[str] = []
    if rows:
        lines += ["## Graded scores: parts per category (%)", "",
                  "| method | judge | category | n | " + " | ".join(PARTS) + " | labels | failures |",
                  "|---|---|---|---|" + "---|" * (len(PARTS) + 2)]
        for method, judge, g in rows:
            for cat in order_categories(g["by_category"]):
                c = g["by_category"][cat]
                labels = ", ".join(f"{k} {v}" for k, v in (c.get("labels") or {}).items()) or "–"
                lines.append(f"| {method} | {judge} | {cat} | {c['n']} | " + " | ".join(_f(c.get(p)) for p in PARTS)
                             + f" | {labels} | {c['failures']} |")
            lines.append(f"| {method} | {judge} | **upstream overall** | | " + " | ".join(
                _f(g.get("upstream_overall")) if p == "upstream" else "" for p in PARTS) + " | | |")
        lines += ["", ("The headline score per category (table above) is the mean question score: the rubric mean "
                       "(BEAM), tau_norm x F1 (event ordering), 1 / 0.5 / 0 (cognitive). `upstream` is what BEAM's "
                       "report script computes: each rubric item read with int() (a 0.5 counts 0) and tau_norm alone "
                       "for event ordering, averaged per conversation, then over conversations."), ""]
    lines += _leniency_lines(run)
    unscored = {m: mm["unscored"] for m, mm in metrics.items() if mm.get("unscored")}
    if unscored:
        lines += ["## Unscored questions (a type no scorer knows: counted, not scored)", "",
                  "| method | category | questions |", "|---|---|---|"]
        lines += [f"| {m} | {c} | {n} |" for m, u in unscored.items() for c, n in u.items()]
        lines.append("")
    return lines


def _leniency_lines(run: Path) -> list[str]:
    from mnemis.eval.run_dir import read_checked

    data = read_checked(run / GRADED_LENIENCY_FILE)
    if data is None:
        return []
    lines = [f"## Graded judges' controls (mean score %, {data.get('n_questions', 0)} questions)", "",
             "| judge | reference (should be high) | swapped (should be low) | vague (should be low) | failures |",
             "|---|---|---|---|---|"]
    for judge, cells in (data.get("judges") or {}).items():
        fails = sum((cells.get(k) or {}).get("failures", 0) for k in ("reference", "swapped", "vague"))
        lines.append(f"| {judge} | " + " | ".join(_f((cells.get(k) or {}).get("mean"))
                                                  for k in ("reference", "swapped", "vague")) + f" | {fails} |")
    return lines + ["", ("Swapped: another conversation's reference for the same kind of question; vague: a fixed "
                         "reply that sounds related and commits to nothing. Their scores are the judge's leniency."), ""]


def health_by_category(records: list) -> dict[str, dict[str, int]]:
    """``{category: {flag: questions}}`` over records (one method), plus ``n`` per category."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        cell = out.setdefault(r.category, {"n": 0})
        cell["n"] += 1
        for f in set(r.flags):
            cell[f] = cell.get(f, 0) + 1
    return out


def health_section(records: list) -> list[str]:
    """Run-health flags per method and category (rows only for flags that occurred)."""
    methods = list(dict.fromkeys(r.method for r in records))
    lines: list[str] = []
    for m in methods:
        h = health_by_category([r for r in records if r.method == m])
        flags = sorted({f for c in h.values() for f in c if f != "n"})
        if not flags:
            continue
        if not lines:
            lines = ["## Run health per category (questions flagged)", ""]
        lines += [f"**{m}**", "", "| category | n | " + " | ".join(flags) + " |", "|---|---|" + "---|" * len(flags)]
        for cat in order_categories(h):
            lines.append(f"| {cat} | {h[cat]['n']} | " + " | ".join(str(h[cat].get(f, 0)) for f in flags) + " |")
        lines.append("")
    return lines
