"""The one LLM interface every stage talks to.

A stage builds ``LLMRequest``s for *all* its pending items and calls ``generate`` once; the
result list has the same order. Backends only turn messages into text
(``Backend.complete``); validation, retries, the response cache and the token ledger live in
``mnemis.models.llm.client.LLM`` so every backend gets them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field, field_validator, model_validator


class Sampling(BaseModel):
    """Sampling parameters; ``max_tokens = 0`` (config ``auto`` or null) = the reply schema's worst case
    (:mod:`mnemis.models.llm.budget`)."""

    model_config = {"frozen": True}

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = Field(512, ge=0)
    seed: int = 0

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _auto(cls, value: Any) -> Any:
        return 0 if value is None or (isinstance(value, str) and value.strip().lower() == "auto") else value


class LLMRequest(BaseModel):
    """One chat request. ``schema`` (a pydantic model class) constrains and validates the reply."""

    model_config = {"arbitrary_types_allowed": True}

    messages: list[dict[str, str]]
    schema_: type[BaseModel] | None = Field(default=None, alias="schema")
    sampling: Sampling = Field(default_factory=Sampling)
    stage: str = "default"
    decode_schema: dict[str, Any] | None = Field(
        None, description="schema for constrained decoding when it differs from the class's (reply budget fit)")
    salvage: bool = Field(True, description="keep the complete items of a reply that fails validation")

    def json_schema(self) -> dict[str, Any] | None:
        if self.decode_schema is not None:
            return self.decode_schema
        return _json_schema(self.schema_) if self.schema_ is not None else None


@functools.lru_cache(maxsize=4096)
def _json_schema(cls: type[BaseModel]) -> dict[str, Any]:
    """A schema class's JSON schema, built once (callers must not mutate it)."""
    return cls.model_json_schema()


class Completion(BaseModel):
    """What a backend returns for one request: raw text and token counts."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = Field(None, description="no reply for this item: the engine's failure (dead, connection "
                              "refused or reset, out of memory, timeout): retried, then EngineFailure stops the stage")
    refused: bool = Field(False, description="the error is the backend refusing this very request (longer than the "
                          "model's context, a schema it cannot compile): the item fails as a bad reply does")
    over_limit: bool = Field(False, description="refused as over the model's completion cap or window (a refusal: "
                             "never retried, never cached, since the same request would be refused again)")
    unconstrained: bool = Field(False, description="a schema request decoded without its schema (format refused)")

    @model_validator(mode="after")
    def _over_limit_is_a_refusal(self) -> Completion:
        if self.over_limit:
            self.refused = True
        return self


class LLMResult(BaseModel):
    """The validated outcome of one request. ``parsed`` is None when the item failed."""

    model_config = {"arbitrary_types_allowed": True}

    text: str = ""
    parsed: BaseModel | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    retries: int = 0
    truncated: bool = Field(False, description="the reply stopped at max_tokens")
    salvaged: bool = Field(False, description="parsed holds only the complete items of a broken reply")
    over_limit: bool = Field(False, description="refused as over the served model's completion cap or window: "
                                                "no reply")

    @property
    def ok(self) -> bool:
        return self.error is None


class Backend(Protocol):
    """Turns chat requests into completions; constrained decoding from ``request.json_schema()``.

    A backend that serves a model with limits also has ``limits() -> ModelLimits`` and ``count_prompts(requests)
    -> list[int]`` (:mod:`mnemis.models.llm.limits`); the client then keeps every request within them."""

    model_id: str

    def complete(self, requests: Sequence[LLMRequest]) -> list[Completion]: ...
