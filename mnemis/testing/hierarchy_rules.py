"""Rule-based replies for the hierarchy stages, so a scale run with the scripted LLM builds a real hierarchy.

``base_graph_responder`` answers the categorisation prompts with a minimal schema instance (no assignment), so
the hierarchy degenerates into one category per entity and stops after one layer. ``hierarchy_responder`` reads
the prompt's numbered ``Nodes:`` list instead and puts every ``group_size`` consecutive nodes into one category
(named after the first node and the layer, e.g. ``Kalo cluster 1``; a lone last node joins the group before
it), so each layer is about ``group_size`` times smaller than the one below, as a model's would be, and every
layer of the build runs. The two-step categoriser (``hierarchy.propose`` / ``hierarchy.assign``) gets the same
groups: one proposed name per group, then every node placed in its group's name. Every other request goes to
``base_graph_responder``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.prompts.categorize_two_step import node_key
from mnemis.testing.responder import base_graph_responder, section, user_text

STAGES = ("hierarchy.categorize", "hierarchy.reask")
_LAYER = re.compile(r"^Layer (\d+):", re.MULTILINE)
_PROPOSE_LAYER = re.compile(r"categories of layer (\d+)")
_ASSIGN_LAYER = re.compile(r"^Allowed categories \(layer (\d+)\):", re.MULTILINE)
_BETWEEN = re.compile(r"between (\d+) and (\d+) category names")


def _groups(n: int, group_size: int) -> list[range]:
    """Consecutive 0-based index ranges of ``group_size`` (a lone last node joins the group before it)."""
    starts = list(range(0, n, group_size))
    if len(starts) > 1 and n - starts[-1] == 1:  # no category of one
        starts.pop()
    return [range(start, starts[k + 1] if k + 1 < len(starts) else n) for k, start in enumerate(starts)]


def _first_word(line: str) -> str:
    return line.split(" [")[0].split()[0]


def two_step_reply(req: LLMRequest, group_size: int = 6) -> dict[str, Any] | None:
    """The two-step categoriser's replies with ``categorize_reply``'s groups: ``{"categories": [...]}`` for a
    proposal, ``{"placements": {...}}`` for an assignment; None for another stage or no node list."""
    if req.stage not in ("hierarchy.propose", "hierarchy.assign"):
        return None
    nodes = section(req, "Nodes:")
    if not nodes:
        return None
    text = user_text(req)
    groups = _groups(len(nodes), group_size)
    if req.stage == "hierarchy.propose":
        m = _PROPOSE_LAYER.search(text)
        layer = int(m.group(1)) + 1 if m else 1
        names = [f"{_first_word(nodes[g[0]])} cluster {layer}" for g in groups]
        bounds = _BETWEEN.search(text)
        if bounds:  # as many names as the prompt allows (repeats of the last group's name fill a shortfall)
            least, most = int(bounds.group(1)), int(bounds.group(2))
            names = (names + [f"{names[-1]} {k}" for k in range(2, least + 1)])[:max(least, min(most, len(names)))]
        return {"categories": names}
    lines = text.splitlines()
    head = _ASSIGN_LAYER.search(text)
    start = lines.index(head.group(0)) + 1 if head else len(lines)
    allowed = []
    for ln in lines[start:]:
        if not ln.startswith("- "):
            break
        allowed.append(ln[2:].strip())
    placements = {}
    for k, g in enumerate(groups):
        name = allowed[min(k, len(allowed) - 1)] if allowed else ""
        for i in g:
            key = node_key(i + 1, nodes[i].split(" [")[0])
            placements[key] = [name]
    return {"placements": placements}


def categorize_reply(req: LLMRequest, group_size: int = 6) -> dict[str, Any] | None:
    """``{"assignments": [...]}`` grouping the listed nodes in order; None for another stage or no node list."""
    if req.stage not in STAGES:
        return None
    nodes = section(req, "Nodes:")
    if not nodes:
        return None
    m = _LAYER.search(user_text(req))
    layer = int(m.group(1)) if m else 1
    starts = list(range(0, len(nodes), group_size))
    if len(starts) > 1 and len(nodes) - starts[-1] == 1:  # no category of one
        starts.pop()
    out = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(nodes)
        first = nodes[start].split(" [")[0].split()[0]
        out.append({"category": f"{first} cluster {layer}", "indexes": list(range(start + 1, end + 1))})
    return {"assignments": out}


def hierarchy_responder(req: LLMRequest) -> Any:
    """``categorize_reply`` / ``two_step_reply`` for the categorisation stages, ``base_graph_responder`` for
    everything else."""
    reply = categorize_reply(req)
    if reply is None:
        reply = two_step_reply(req)
    return reply if reply is not None else base_graph_responder(req)


def scripted_hierarchy_llm(cache_dir: str | Path | None = None, *, model_id: str = "scripted-hierarchy",
                           max_retries: int = 1) -> LLM:
    """The real ``LLM`` client over ``hierarchy_responder`` (cache, ledger, validation)."""
    return LLM(ScriptedBackend(hierarchy_responder, model_id=model_id), cache_dir=cache_dir,
               cache_mode="readwrite" if cache_dir is not None else "off", max_retries=max_retries)
