"""The records of System-2 global selection: its settings, the log of each query's walk, and its result."""

from __future__ import annotations

from pydantic import BaseModel, Field

from mnemis.settings import System2Config  # noqa: F401  (re-exported: the settings own the record)
from mnemis.types import RetrievedContext


class RoundLog(BaseModel):
    """One LLM round of one query's walk (ids are store ids)."""

    round: int
    layer: int = Field(description="highest layer among the candidates (0 = entities)")
    candidates: list[str]
    prompts: int
    failed_prompts: int = 0
    selected: list[str] = Field(default_factory=list)
    flagged: list[str] = Field(default_factory=list, description="take_all_children shortcuts")
    invented: int = 0
    salvaged: int = Field(0, description="failed replies whose complete selections were kept")
    too_long: int = Field(0, description="prompts the engine rejected as longer than its window (after re-splits)")
    resplit: int = Field(0, description="pages split again because the engine rejected them as too long")
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Traversal(BaseModel):
    """The traversal log of one query (one line of ``traversal.jsonl``)."""

    question_id: str
    group_id: str
    rounds: list[RoundLog] = Field(default_factory=list)
    fallback: str | None = Field(None, description="why the query fell back to System-1, if it did")
    flags: list[str] = Field(default_factory=list)
    selected_nodes: int = 0
    counts: dict[str, int] = Field(default_factory=dict, description="items per type after expansion")

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.rounds)

    @property
    def calls(self) -> int:
        return sum(r.prompts for r in self.rounds)


class System2Result(BaseModel):
    context: RetrievedContext
    traversal: Traversal

    @property
    def fallback(self) -> bool:
        return self.traversal.fallback is not None
