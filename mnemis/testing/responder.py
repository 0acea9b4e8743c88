"""A scripted LLM for scale runs: rule-based, valid replies for every base-graph stage, no model.

``base_graph_responder`` reads the rendered prompt back (the text a model would see): capitalised words
of the CURRENT message are entities, each other entity is linked to the first one by a fact, a known
entity starting with a new name resolves it, identical facts are duplicates. Any other stage (or a
prompt it cannot parse) gets a minimal valid instance of the request's schema, so a whole build runs.
``scripted_llm`` wraps it in the real ``LLM`` client (cache, ledger, validation) for benchmarks and tests.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend, minimal_instance

_CAP = re.compile(r"\b[A-Z][a-z]{2,}\b")
_ITEM = re.compile(r"^(\d+)\. (.*)$")
STOP = {"The", "Task", "Hey", "Wow", "Thanks", "That", "This", "What", "Yes", "And", "User", "Assistant", "Can",
        "How", "Sure", "Here", "Let", "Also", "But", "Maybe", "Please", "Great", "When", "Where", "Which"}


def user_text(req: LLMRequest) -> str:
    return req.messages[-1]["content"]


def current_message(req: LLMRequest) -> str:
    """The line after ``CURRENT message`` in an extraction prompt."""
    lines = user_text(req).splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("CURRENT message"))
    return lines[i + 1]


def entity_name(req: LLMRequest) -> str:
    """The entity an ``entity_attributes`` prompt is about (its ``Entity:`` line)."""
    line = next(ln for ln in user_text(req).splitlines() if ln.startswith("Entity: "))
    return line.removeprefix("Entity: ")


def section(req: LLMRequest, header: str) -> list[str]:
    """Items of the numbered list that follows the line ``header`` in the user message."""
    lines = user_text(req).splitlines()
    if header not in lines:
        return []
    out = []
    for ln in lines[lines.index(header) + 1:]:
        m = _ITEM.match(ln)
        if not m:
            break
        out.append(m.group(2))
    return out


def _names(text: str) -> list[str]:
    body = text.split(":", 1)[1] if ":" in text else text
    return [w for w in dict.fromkeys(_CAP.findall(body)) if w not in STOP][:8]


def _rules(req: LLMRequest) -> dict[str, Any] | None:
    stage = req.stage
    if stage == "extract_entities":
        return {"names": _names(current_message(req))}
    if stage in ("reflect_entities", "reflect_facts"):
        return {"names": []} if stage == "reflect_entities" else {"facts": []}
    if stage == "extract_facts":
        ents = section(req, "Entities:")
        return {"facts": [{"source": 0, "target": j, "relation": "RELATES_TO",
                           "fact": f"{ents[0]} relates to {ents[j]}.", "valid_at": "", "invalid_at": ""}
                          for j in range(1, len(ents))]}
    if stage == "resolve_entities":
        known = [k.split(" - ")[0] for k in section(req, "Known entities:")]
        new = section(req, "New names:")
        return {"decisions": [{"new": i, "match": next((j for j, k in enumerate(known)
                                                         if k.lower().startswith(n.lower()) and k != n), -1)}
                              for i, n in enumerate(new)]}
    if stage == "dedup_facts":
        old = [o.split(" (")[0] for o in section(req, "Existing facts:")]
        header = next(h for h in user_text(req).splitlines() if h.startswith("New facts"))
        new = section(req, header)
        return {"decisions": [{"new": i, "duplicate_of": old.index(f) if f in old else -1, "contradicts": []}
                              for i, f in enumerate(new)]}
    if stage == "entity_attributes":
        name = entity_name(req)
        return {"summary": f"{name} comes up in the conversation.", "tags": ["Thing"]}
    return None


def base_graph_responder(req: LLMRequest) -> Any:
    """A valid reply for ``req`` (rule-based for base-graph stages, minimal schema instance otherwise)."""
    try:
        reply = _rules(req)
    except (StopIteration, IndexError, ValueError):
        reply = None
    if reply is not None:
        return reply
    schema = req.json_schema()
    return "ok" if schema is None else minimal_instance(schema)


def scripted_llm(cache_dir: str | Path | None = None, *, cache_mode: str = "readwrite",
                 model_id: str = "scripted-scale", max_retries: int = 1) -> LLM:
    """The real ``LLM`` client over a ``ScriptedBackend(base_graph_responder)`` (Hydra ``_target_``-able)."""
    return LLM(ScriptedBackend(base_graph_responder, model_id=model_id), cache_dir=cache_dir,
               cache_mode=cache_mode if cache_dir is not None else "off", max_retries=max_retries)
