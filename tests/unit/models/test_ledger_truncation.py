"""Replies cut at max_tokens are counted per stage in the ledger (every attempt, retries included)."""

from __future__ import annotations

from pydantic import BaseModel

from mnemis.models.ledger import Ledger
from mnemis.models.llm.base import Completion, LLMRequest
from mnemis.models.llm.client import LLM


class _Answer(BaseModel):
    text: str


class _CutOnce:
    """First reply of each request is cut mid-JSON (finish_reason length), the retry is complete."""

    model_id = "cut-once"

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def complete(self, requests):
        out = []
        for r in requests:
            key = r.messages[0]["content"]
            if key in self.seen or "free" in key:
                out.append(Completion(text='{"text": "ok"}', prompt_tokens=3, completion_tokens=4, finish_reason="stop"))
            else:
                self.seen.add(key)
                out.append(Completion(text='{"text": "o', prompt_tokens=3, completion_tokens=4, finish_reason="length"))
        return out


def test_truncated_attempts_are_counted_per_stage(tmp_path):
    llm = LLM(_CutOnce(), max_retries=1)
    reqs = [LLMRequest(messages=[{"role": "user", "content": f"q{i}"}], schema=_Answer, stage="a") for i in range(3)]
    reqs.append(LLMRequest(messages=[{"role": "user", "content": "free"}], schema=_Answer, stage="b"))
    results = llm.generate(reqs)
    assert all(r.ok for r in results)
    assert llm.ledger.stage("a").truncated == 3 and llm.ledger.stage("a").retries == 3
    assert llm.ledger.stage("b").truncated == 0
    path = llm.ledger.save(tmp_path / "ledger.json")
    assert Ledger.load(path).stage("a").truncated == 3
