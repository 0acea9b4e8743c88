"""Rule-based replies for the hierarchy stages, so a scale run with the scripted LLM builds a real hierarchy.

``base_graph_responder`` answers the categorisation prompts with a minimal schema instance (no assignment), so
the hierarchy degenerates into one category per entity and stops after one layer. ``hierarchy_responder`` reads
the prompt's numbered ``Nodes:`` list instead and puts every ``group_size`` consecutive nodes into one category
(named after the first node and the layer, e.g. ``Kalo cluster 1``; a lone last node joins the group before
it), so each layer is about ``group_size`` times smaller than the one below, as a model's would be, and every
layer of the build runs. Every other request goes to ``base_graph_responder``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.scale.responder import base_graph_responder, section, user_text

STAGES = ("hierarchy.categorize", "hierarchy.reask")
_LAYER = re.compile(r"^Layer (\d+):", re.MULTILINE)


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
    """``categorize_reply`` for the categorisation stages, ``base_graph_responder`` for everything else."""
    reply = categorize_reply(req)
    return reply if reply is not None else base_graph_responder(req)


def scripted_hierarchy_llm(cache_dir: str | Path | None = None, *, model_id: str = "scripted-hierarchy",
                           max_retries: int = 1) -> LLM:
    """The real ``LLM`` client over ``hierarchy_responder`` (cache, ledger, validation)."""
    return LLM(ScriptedBackend(hierarchy_responder, model_id=model_id), cache_dir=cache_dir,
               cache_mode="readwrite" if cache_dir is not None else "off", max_retries=max_retries)
