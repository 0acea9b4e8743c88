"""Fingerprints of the prompt modules that shape a built memory (part of its artifact address).

A prompt module holds a prompt's text, its render function and its reply schema, so its code is what
the memory depends on. The fingerprint is a hash of the module's syntax tree with docstrings removed:
editing any instruction, field, description or render line changes it; comments, docstrings and
formatting do not. Every module of this package counts as a build prompt unless it is named in
``NOT_BUILD`` (answering, judging, System-2 selection) or belongs to the Mem0 baseline, so a new
build prompt is covered without registering it.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent
SHARED = ("base",)  # helpers every prompt renders through
NOT_BUILD = frozenset({"__init__", "fingerprint", "budgets", "answer", "judge_locomo", "judge_longmemeval", "select_nodes",
                       "judge_beam", "judge_locomo_plus"})
MEM0_PREFIX = "mem0_"


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def module_fingerprint(path: str | Path) -> str:
    """sha256 (16 hex) of a Python file's syntax tree without docstrings."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise ValueError(f"prompt module {path} does not parse: {exc}") from exc
    return hashlib.sha256(ast.dump(_strip_docstrings(tree)).encode()).hexdigest()[:16]


def prompt_modules(root: str | Path | None = None) -> dict[str, list[str]]:
    """Module names of ``root`` by role: ``build``, ``mem0`` (the Mem0 baseline's own) and ``other``."""
    out: dict[str, list[str]] = {"build": [], "mem0": [], "other": []}
    for p in sorted(Path(root if root is not None else PROMPTS_DIR).glob("*.py")):
        name = p.stem
        if name in SHARED:
            continue
        role = "other" if name in NOT_BUILD else "mem0" if name.startswith(MEM0_PREFIX) else "build"
        out[role].append(name)
    return out


def _fingerprints(root: str | Path | None, roles: tuple[str, ...]) -> dict[str, str]:
    root = Path(root if root is not None else PROMPTS_DIR)
    mods = prompt_modules(root)
    names = [*SHARED, *(n for r in roles for n in mods[r])]
    return {n: module_fingerprint(root / f"{n}.py") for n in names}


def build_prompt_fingerprints(root: str | Path | None = None) -> dict[str, str]:
    """``{module: fingerprint}`` of every base-graph and hierarchy prompt module (plus ``base``)."""
    return _fingerprints(root, ("build",))


def mem0_prompt_fingerprints(root: str | Path | None = None) -> dict[str, str]:
    """The Mem0 baseline's prompts plus the graph prompts Mem0g reuses (every build prompt)."""
    return _fingerprints(root, ("mem0", "build"))
