"""Below the application (every module of ``mnemis/`` outside ``mnemis/app/`` and the test kit ``mnemis/testing/``,
which stands above it and reads run directories' ``config.json`` files as written) code takes its typed settings
section: no plain config dict is read there. The AST check forbids ``plain[...]``, ``.plain()`` and
``.get("<key>", <default>)`` on a config section (a receiver named like one: ``cfg``, ``config``, ``settings``,
``judge``, ``peers``, ...), which is where a default used to hide beside the YAML's."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mnemis"
APP = PACKAGE / "app"
TESTING = PACKAGE / "testing"  # the test kit, a floor above the application (docs/architecture.md)
# names a config section goes by (a whole config, one of its sections, or a section of a run dir's config.json)
SECTION_NAMES = frozenset({
    "plain", "cfg", "config", "conf", "settings", "section", "judge_cfg", "judge", "peers", "dataset", "ds",
    "tracker", "scale", "paths", "retrieval", "system1", "system2", "fusion", "context", "answer", "answer_cfg",
    "mem0", "mem0g", "graded", "graded_leniency", "leniency", "bootstrap", "boot", "opts", "options", "slice", "sl",
})


def _names(node: ast.AST) -> set[str]:
    """Every identifier a receiver expression is made of (names and attributes)."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def violations(source: str, where: str = "<snippet>") -> list[str]:
    """``<where>:<line>: <what>`` for every plain config read in ``source``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "plain":
            out.append((node.lineno, "plain[...]"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "plain" and not node.args:
                out.append((node.lineno, ".plain()"))
            elif (node.func.attr == "get" and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str) and _names(node.func.value) & SECTION_NAMES):
                out.append((node.lineno, f"{ast.unparse(node)} (a default beside the YAML's)"))
    return [f"{where}:{line}: {what}" for line, what in sorted(out)]


def test_no_plain_config_below_the_application():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if APP in path.parents or TESTING in path.parents:
            continue
        found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert found == []


def test_the_check_catches_each_form():
    snippet = '''
def stage(plain, settings, cfg, node, reply):
    a = plain["judge"]["max_tokens"]
    b = settings.plain()
    c = cfg.get("max_lines", 40)
    d = (settings.judge or {}).get("failed", "wrong")
    e = node.get("_target_", "")        # a model node: its target's own defaults
    f = reply.get("reasoning", None)    # an LLM reply, not a config section
    g = cfg.get("max_lines")            # no default written here
    return a, b, c, d, e, f, g
'''
    assert violations(snippet) == [
        "<snippet>:3: plain[...]", "<snippet>:4: .plain()",
        "<snippet>:5: cfg.get('max_lines', 40) (a default beside the YAML's)",
        "<snippet>:6: (settings.judge or {}).get('failed', 'wrong') (a default beside the YAML's)"]
