"""The user docs hold together: every relative link (and its ``#anchor``) of the README, ``docs/`` and the
experiment READMEs points at a file and heading that exist, the README stays a front door, and no user doc cites
the project's internal notes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "experiments").glob("**/README.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")
README_MAX_LINES = 300


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, code = [], False
    for ln in text.splitlines():
        if FENCE.match(ln):
            code = not code
        elif not code:
            out.append(ln)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (``-`` and ``_`` kept), spaces to ``-``."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for ln in _prose(path.read_text(encoding="utf-8")):
        if m := re.match(r"#{1,6} (.+)", ln):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path):
    bad = []
    for ln in _prose(doc.read_text(encoding="utf-8")):
        for target in LINK.findall(ln):
            if re.match(r"[a-z]+:", target):  # http(s), mailto
                continue
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            if not dest.exists():
                bad.append(f"{target}: no file {dest}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert bad == []


def test_slugs_follow_github():
    assert slug("Quickstart (`make run`)") == "quickstart-make-run"
    assert slug("Reading a run: run health, judges, explorer") == "reading-a-run-run-health-judges-explorer"
    assert slug("System-1 evidence recall") == "system-1-evidence-recall"


def test_the_readme_is_a_front_door():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    heads = [ln[3:] for ln in text.splitlines() if ln.startswith("## ")]
    for first, later in [("Two commands", "Reproduction"), ("Reproduction", "Usage"), ("Usage", "Layout")]:
        assert heads.index(first) < heads.index(later), heads
    for page in ("docs/usage.md", "docs/results.md", "docs/fidelity.md", "experiments/paper/README.md"):
        assert f"]({page}" in text, page


def test_the_readme_layout_names_what_is_there():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1]
    for name in ("app/", "cli.py", "jobs.py", "doctor.py", "provenance.py", "compare.py", "render.py", "texts.py",
                 "locks.py", "packaged.py", "data/", "BEAM", "LoCoMo-Plus", "LongMemEval-M"):
        assert name in layout, name
    for top in ("mnemis", "kernels", "conf", "docs", "examples", "experiments", "scripts", "tests"):
        assert (REPO / top).is_dir() and f"{top}/" in layout, top
    for sub in re.findall(r"^  (\w+)/ ", layout, flags=re.MULTILINE):
        assert (REPO / "mnemis" / sub).is_dir(), sub
    for module in re.findall(r"\b(\w+)\.py\b", layout.split("kernels/", 1)[0]):
        assert list((REPO / "mnemis").glob(f"**/{module}.py")), module


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_user_docs_cite_no_internal_notes(doc: Path):
    text = doc.read_text(encoding="utf-8")
    found = re.findall(r"issue #\d+|REFERENCE §|REFERENCE\.md|STYLE\.md|DESIGN\.md|\.\./shared|reviews/", text)
    assert found == []


def test_code_and_configs_cite_the_paper_not_internal_notes():
    """Docstrings and config comments are read by users too: they cite the paper or the repo's docs."""
    hits = []
    for top in ("mnemis", "conf", "kernels", "experiments"):
        for path in (REPO / top).rglob("*"):
            if path.suffix in (".py", ".yaml", ".md") and path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                hits += [f"{path.relative_to(REPO)}: {m}" for m in re.findall(r"REFERENCE §|REFERENCE\.md|DESIGN\.md|"
                                                                             r"STYLE\.md|issue #\d+", text)]
    assert hits == []
