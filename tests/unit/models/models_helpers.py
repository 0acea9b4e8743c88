"""Shared schemas and request builders for the model-layer unit tests."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from mnemis.models.llm.base import LLMRequest, Sampling


class Fact(BaseModel):
    subject: str
    relation: Literal["likes", "owns", "visited"]
    obj: str = Field(min_length=1)


class Facts(BaseModel):
    facts: list[Fact]
    confidence: float = Field(ge=0.0, le=1.0)


def make_request(i: int = 0, stage: str = "extract", schema=Facts, max_tokens: int = 64) -> LLMRequest:
    return LLMRequest(
        messages=[{"role": "system", "content": "Extract facts."}, {"role": "user", "content": f"episode {i}"}],
        schema=schema, sampling=Sampling(max_tokens=max_tokens), stage=stage,
    )


GOOD = {"facts": [{"subject": "Ann", "relation": "likes", "obj": "tea"}], "confidence": 0.9}


