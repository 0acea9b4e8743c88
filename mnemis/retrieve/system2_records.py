"""The records of System-2 global selection: its settings, the log of each query's walk, and its result."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from mnemis.types import RetrievedContext


class System2Config(BaseModel):
    """Knobs of global selection (keys match ``conf/retrieval/*.yaml`` ``system2:``)."""

    model_config = {"extra": "forbid"}

    entity_round: bool = True
    prompt_form: Literal["ours", "released"] = Field(
        "ours", description="ours: instructions as a system message, nodes before the query, prompt-local ids "
        "n1.., alphabetical order; released: the authors' form (one user message, the query first, store ids, "
        "get_all_children, nodes in store order)")
    use_summary: bool = False
    use_tags: bool = True
    include_shortcut_nodes: bool = Field(True, description="a take_all_children node enters the context itself")
    max_candidates_per_prompt: int | None = Field(
        60, ge=1, description="split wider candidate lists into several prompts; None = one prompt (the paper)")
    page_by_window: bool = Field(
        False, description="split a candidate list into pages whose estimated prompt and reply fit window_tokens, "
        "and split again any page the engine still rejects as too long (False: the paper, one prompt per round "
        "however long)")
    window_tokens: int | None = Field(
        None, ge=256, description="the selection model's window (page_by_window); None: no window paging")
    max_rounds: int = Field(12, ge=1, description="safety bound; a hierarchy of L layers needs L+1")
    max_facts_per_entity: int | None = Field(10, ge=0, description="None = all (the paper)")
    max_episodes_per_entity: int | None = Field(10, ge=0, description="None = all (the paper)")
    max_neighbours_per_entity: int | None = Field(5, ge=0, description="None = all (the paper)")
    max_items_per_type: int | None = Field(
        100, ge=1, description="cap per type after expansion, per query, ranked first; None = no cap (the paper)")
    constrain_ids: bool = Field(True, description="decoding schema restricts ids to the shown ones")
    min_top_selections: int = Field(
        0, ge=0, description="decoding schema: at least this many picks in the first round (0 = may pick none and "
                             "end the walk, the paper; needs constrain_ids)")
    salvage: bool = Field(True, description="keep the complete selections of a truncated reply")
    max_tokens: int | Literal["auto"] = Field(512, description="reply budget; auto = the schema's worst case")
    temperature: float = 0.0
    seed: int = 0


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
