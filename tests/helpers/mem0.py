"""Shared helpers of the Mem0 unit tests: synthetic episodes, prompt readers, the scripted Decider."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from mnemis.baselines.mem0.store import Mem0Store
from mnemis.models.ledger import Ledger
from mnemis.models.llm.base import LLMRequest
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.types import Episode

T0 = datetime(2023, 5, 8, 13, 0)
_NUM = re.compile(r"^(\d+)\. (.*)$")


def episodes(group: str, turns: list[tuple[str, str]]) -> list[Episode]:
    return [Episode(group_id=group, id=f"{group}:D1:{i + 1}", source_id=f"D1:{i + 1}", name=f"m{i}", speaker=s,
                    content=f"{s}: {t}", valid_at=T0 + timedelta(minutes=i), session=1, turn=i, position=i)
            for i, (s, t) in enumerate(turns)]


def text_of(req: LLMRequest) -> str:
    return req.messages[-1]["content"]


def block(req: LLMRequest, header: str) -> list[str]:
    """Lines following the line starting with ``header`` up to the next blank line."""
    lines = text_of(req).splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(header))
    out = []
    for ln in lines[i + 1:]:
        if not ln.strip():
            break
        out.append(ln)
    return out


def new_messages(req: LLMRequest) -> list[str]:
    """Message texts of the NEW MESSAGES block, without the speaker."""
    return [ln.split(": ", 1)[1] for ln in block(req, "NEW MESSAGES")]


def shown_memories(req: LLMRequest) -> list[str]:
    return [m.group(2) for ln in block(req, "Existing memories:") if (m := _NUM.match(ln))]


def new_fact(req: LLMRequest) -> str:
    return block(req, "NEW FACT")[0]


class Decider:
    """Scripted Mem0 LLM: each message text is one fact; ``plan[fact]`` = (op, target memory text, text)."""

    def __init__(self, plan: dict[str, tuple[str, str | None, str]] | None = None):
        self.plan = plan or {}

    def __call__(self, req: LLMRequest):
        if req.stage == "mem0_extract":
            return {"facts": [m for m in new_messages(req) if m]}
        if req.stage == "mem0_summary":
            return {"summary": "summary of " + "; ".join(ln.split("] ", 1)[1] for ln in block(req, "New messages"))}
        if req.stage == "mem0_update":
            fact, shown = new_fact(req), shown_memories(req)
            if fact not in self.plan:
                return {"operation": "ADD", "id": -1, "text": fact}
            op, target, text = self.plan[fact]
            if fact == "garbage":
                return "this is not json"
            idx = shown.index(target) if isinstance(target, str) else (target if target is not None else -1)
            return {"operation": op, "id": idx, "text": text}
        raise AssertionError(f"unexpected stage {req.stage}")


def make_llm(responder) -> tuple[LLM, ScriptedBackend]:
    backend = ScriptedBackend(responder)
    return LLM(backend, max_retries=1, ledger=Ledger()), backend


def stages(backend: ScriptedBackend) -> list[tuple[str, int]]:
    return [(b[0].stage, len(b)) for b in backend.batches]


def live(store: Mem0Store, g: str) -> list[str]:
    return [m.text for m in store.memories(g)]
