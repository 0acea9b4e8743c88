"""Every figure of ``docs/results.md`` and of the README's figure sections (its reproduction table) is in the
JSON file under ``experiments/results/`` that its table (or subsection) cites, so a figure without a file, or one
that no longer matches its file, fails.

Rules (both pages follow them; a subsection runs from one heading to the next):

- a table row's figures are checked against the files named in its ``JSON`` column, or, for a table without
  that column, against the files named in the text lines just above the table (its caption); a cited file
  may name a key path (``file.json#runs.default``: only that part of the file counts), and a ``JSON`` cell
  holding only a key path (`` `#runs.bm25` ``) means that part of the caption's file;
- a table's first column (what was measured) and the columns ``Paper``, ``target``, ``paper / target``, ``Command``
  and ``JSON`` hold settings and other sources, not our figures;
- in text outside tables, every number with a decimal point must be in a file cited in the same
  subsection (integers there are settings: 500 groups, k=10); numbers right after ``≤ ≥ < >`` are targets;
- a printed figure matches a JSON number that rounds to it at the printed precision, also as a percentage
  or with seconds printed as milliseconds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
RESULTS = REPO / "docs" / "results.md"
README_FIGURE_SECTIONS = ("Reproduction",)  # the README's sections that hold figures; docs/results.md is all figures
CITE = re.compile(r"experiments/results/[\w.-]+\.json(?:#[^\s`|,;]+)?")
FRAGMENT = re.compile(r"`(#[^\s`|]+)`")
# a figure: not glued to a word, an id or an operator (p95, int8, recall@10, k=10, 1–4, D1:3 are not figures)
NUMBER = re.compile(r"(?<![\w.,@=:/–-])(?<![≤≥<>] )(?<![≤≥<>])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w@:/–-])(?!\.\d)")
NOT_FIGURES = {"paper", "target", "paper / target", "command", "json", "paper row"}


def section(text: str, heading: str) -> list[str]:
    """The lines of the ``## heading`` section (to the next ``## ``), the heading line first."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == f"## {heading}"), None)
    assert start is not None, f"no '## {heading}' section"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def _strip_code(line: str) -> str:
    return re.sub(r"`[^`]*`", " ", line)


def figures(text: str) -> list[str]:
    """The figures of ``text``; one printed with a minus sign (U+2212) right before it keeps the sign."""
    plain = _strip_code(text).replace("**", "")
    return [("−" if m.start() and plain[m.start() - 1] == "−" else "") + m.group(1) + (m.group(2) or "")
            for m in NUMBER.finditer(plain)]


def _leaves(obj) -> list[float]:
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [float(obj)]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _leaves(v)]
    return []


def matches(printed: str, values: list[float]) -> bool:
    x = float(printed.replace(",", "").replace("−", "-"))
    decimals = len(printed.split(".", 1)[1]) if "." in printed else 0
    tol = 0.5 * 10**-decimals + 1e-9
    return any(abs(v * scale - x) <= tol for v in values for scale in (1, 100, 1000))


def _subtree(obj, path: str, cite: str):
    """``obj`` at the dotted ``path`` (keys may contain dots: the longest matching key wins)."""
    parts = path.split(".")
    while parts:
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if isinstance(obj, dict) and key in obj:
                obj, parts = obj[key], parts[n:]
                break
        else:
            raise AssertionError(f"README cites {cite}: no key {'.'.join(parts)!r} there")
    return obj


def _values(cites: list[str]) -> list[float]:
    """Numbers of the cited files (``file.json#a.b`` = only the subtree at key path ``a.b``)."""
    out = []
    for cite in cites:
        path, _, frag = cite.partition("#")
        file = REPO / path
        assert file.exists(), f"README cites {path}, which is not in the repository"
        data = json.loads(file.read_text())
        out += _leaves(_subtree(data, frag, cite) if frag else data)
    return out


def _check_table(table: list[list[str]], caption: list[str]) -> list[str]:
    head, rows = table[0], table[2:]
    cols = [j for j, h in enumerate(head) if j > 0 and h.lower() not in NOT_FIGURES]
    json_col = next((j for j, h in enumerate(head) if h.lower() == "json"), None)
    problems = []
    in_caption = CITE.findall("\n".join(caption))
    for row in rows:
        cell = row[json_col] if json_col is not None else ""
        # the row's own files, or keys (`#a.b`) inside the caption's file, or the caption's files
        cites = CITE.findall(cell) or [c.split("#")[0] + f for c in in_caption for f in FRAGMENT.findall(cell)] \
            or in_caption
        figs = [f for j in cols if j < len(row) for f in figures(row[j])]
        if figs and not cites:
            problems.append(f"row {row[0]!r}: figures {figs} cite no experiments/results/*.json")
            continue
        values = _values(cites)
        problems += [f"row {row[0]!r}: {f} is not in {cites}" for f in figs if not matches(f, values)]
    return problems


def check(lines: list[str]) -> list[str]:
    """Problems found in a page of figures (empty = every figure is in its file)."""
    subsections: list[list[str]] = [[]]
    for ln in lines:
        if re.match(r"#{1,6} ", ln):
            subsections.append([])
        subsections[-1].append(ln)
    problems: list[str] = []
    for sub in subsections:
        cited = CITE.findall("\n".join(sub))
        caption: list[str] = []  # text lines since the subsection's heading or its previous table
        i = 0
        while i < len(sub):
            if sub[i].startswith("|"):
                table = []
                while i < len(sub) and sub[i].startswith("|"):
                    table.append([c.strip() for c in sub[i].strip().strip("|").split("|")])
                    i += 1
                problems += _check_table(table, caption)
                caption = []
                continue
            ln = sub[i]
            if ln.strip():
                caption.append(ln)
                decimals = [f for f in figures(ln) if "." in f]
                values = _values(cited) if decimals else []
                problems += [f"text {ln.strip()[:60]!r}…: {f} is not in {cited or 'any cited file'}"
                             for f in decimals if not matches(f, values)]
            i += 1
    return problems


def test_every_results_figure_is_in_the_json_it_cites():
    text = RESULTS.read_text(encoding="utf-8")
    assert "| JSON |" in text  # the page holds the results tables
    assert check(text.splitlines()) == []


def test_every_readme_figure_is_in_the_json_it_cites():
    text = README.read_text(encoding="utf-8")
    assert check([ln for name in README_FIGURE_SECTIONS for ln in section(text, name)]) == []


def test_the_readme_holds_figures_only_in_its_checked_sections():
    """A README table with our figures (a ``JSON`` or ``Ours`` column) outside the checked sections would go
    unchecked: such a table belongs in docs/results.md."""
    text = README.read_text(encoding="utf-8")
    checked = {ln for name in README_FIGURE_SECTIONS for ln in section(text, name)}
    heads = [ln for ln in text.splitlines() if ln.startswith("|") and ln not in checked
             and {c.strip().lower() for c in ln.strip().strip("|").split("|")} & {"json", "ours"}]
    assert heads == []


def test_the_check_catches_uncited_and_wrong_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    (tmp_path / "experiments" / "results" / "a.json").write_text(json.dumps({"x": {"p95_ms": 6.981}, "r": 0.7086,
                                                                               "t": 1677.3, "s": 0.0123}))
    good = ["### Latency", "`cmd` → `experiments/results/a.json`:", "",
            "| | measured | target |", "|---|---|---|", "| one query (689 episodes) | p95 **7.0 ms** | ≤ 15 ms |",
            "", "Cache sends 0.709 of the calls, 12.3 ms per step and ≥ 0.95 recall.",
            "", "| what | measured | paper | JSON |", "|---|---|---|---|",
            "| tokens per episode | 1,677 | 6,600 | `experiments/results/a.json` |"]
    assert check(good) == []
    wrong = [ln.replace("1,677", "1,700") for ln in good]
    assert check(wrong) == ["row 'tokens per episode': 1,700 is not in ['experiments/results/a.json']"]
    uncited = good[:-1] + ["| tokens per episode | 1,677 | 6,600 | — |"]
    assert "cite no experiments/results" in check(uncited)[0]
    prose = good + ["", "### Other", "It took 4.2 s."]
    assert check(prose) == ["text 'It took 4.2 s.'…: 4.2 is not in any cited file"]
    missing = [ln.replace("a.json", "gone.json") for ln in good]
    with pytest.raises(AssertionError, match="gone.json"):
        check(missing)
    # a key path restricts the figures to that part of the file
    keyed = ["### K", "`experiments/results/a.json`", "| | p95 | JSON |", "|---|---|---|",
             "| right part | 7.0 | `#x` |", "| wrong part | 7.0 | `experiments/results/a.json#r` |"]
    assert check(keyed) == ["row 'wrong part': 7.0 is not in ['experiments/results/a.json#r']"]
    with pytest.raises(AssertionError, match="no key 'y'"):
        check(keyed[:4] + ["| bad key | 7.0 | `#y` |"])


@pytest.mark.parametrize("text,expected", [
    ("p50 6.1 ms, **p95 7.0 ms** (1 thread: 7.4 / 9.3 ms)", ["6.1", "7.0", "1", "7.4", "9.3"]),
    ("int8 fp32 recall@10 k=10 cats 1–4 D1:3 `python x.py --k 3`", []),
    ("1,536 questions, 0.22× the time, 8.8×, 64/64", ["1,536", "0.22", "8.8"]),
    ("≤ 2,500 and ≥0.60", []),
    ("strict −0.05, CI −0.15 to 0.0", ["−0.05", "−0.15", "0.0"]),
])
def test_figures_are_read_as_printed(text, expected):
    assert figures(text) == expected


def test_a_printed_sign_must_match():
    assert matches("−0.35", [-0.35]) and not matches("−0.35", [0.35]) and not matches("0.35", [-0.35])
