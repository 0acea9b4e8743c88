"""Records shared by every stage: the vocabulary of the framework, no logic beyond ids.

Every record carries ``group_id`` (one memory owner: a LoCoMo conversation, a LongMemEval
question's haystack). Ids are deterministic functions of the group and the source ids, so
re-ingesting the same input never creates duplicates.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

ItemKind = Literal["episode", "entity", "fact", "category"]
EmbeddingKind = Literal["episode", "entity_name", "entity_summary", "fact", "category"]


def stable_id(prefix: str, *parts: str) -> str:
    """A short deterministic id: ``prefix`` + 16 hex chars of sha1 over the parts."""
    digest = hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]
    return f"{prefix}_{digest}"


def normalize_name(name: str) -> str:
    """The form used for exact-name matching of entities: casefolded, single-spaced."""
    return " ".join(name.casefold().split())


def entity_id(group_id: str, name: str) -> str:
    return stable_id("ent", group_id, normalize_name(name))


def fact_id(group_id: str, episode_id: str, index: int) -> str:
    return stable_id("fact", group_id, episode_id, str(index))


def category_id(group_id: str, layer: int, name: str) -> str:
    return stable_id("cat", group_id, str(layer), normalize_name(name))


class Record(BaseModel):
    model_config = {"extra": "forbid"}

    group_id: str


class Episode(Record):
    """One message. ``id`` is ``<group_id>:<source_id>`` (e.g. ``conv-26:D1:3``)."""

    id: str
    source_id: str
    name: str
    speaker: str
    content: str
    valid_at: datetime
    session: int
    turn: int
    position: int = Field(description="order of the episode inside its group, 0-based")

    @staticmethod
    def make_id(group_id: str, source_id: str) -> str:
        return f"{group_id}:{source_id}"


class Entity(Record):
    id: str
    name: str
    summary: str = ""
    tags: list[str] = Field(default_factory=list)
    is_speaker: bool = False
    created_at: datetime | None = None


class Fact(Record):
    id: str
    source_id: str
    target_id: str
    relation: str
    fact: str
    valid_at: datetime | None = None
    invalid_at: datetime | None = None
    created_at: datetime | None = None
    expired_at: datetime | None = None
    episode_ids: list[str] = Field(default_factory=list)


class Mention(Record):
    episode_id: str
    entity_id: str


class Category(Record):
    id: str
    name: str
    layer: int = Field(ge=1)
    tags: list[str] = Field(default_factory=list)
    summary: str = ""
    promoted: bool = False


class CategoryEdge(Record):
    parent_id: str
    child_id: str


class Question(Record):
    id: str
    question: str
    answer: str
    category: str
    evidence: list[str] = Field(default_factory=list, description="episode ids")
    question_date: datetime | None = None
    index: int = Field(0, description="index into the source's question list for this group")
    abstention: bool = False
    meta: dict[str, Any] = Field(
        default_factory=dict,
        description="gold-side, type-specific fields (BEAM rubric and ordering items, LoCoMo-Plus cue and relation "
                    "type, the scorer to use): read by judges and reports, never by an answer prompt")


class Dataset(BaseModel):
    """A loaded benchmark: episodes and questions of every group, in source order."""

    name: str
    groups: list[str]
    episodes: list[Episode]
    questions: list[Question]
    warnings: dict[str, int] = Field(default_factory=dict)

    def episodes_of(self, group_id: str) -> list[Episode]:
        return [e for e in self.episodes if e.group_id == group_id]

    def questions_of(self, group_id: str) -> list[Question]:
        return [q for q in self.questions if q.group_id == group_id]

    def summary(self) -> dict[str, object]:
        by_cat: dict[str, int] = {}
        for q in self.questions:
            by_cat[q.category] = by_cat.get(q.category, 0) + 1
        sessions = {(e.group_id, e.session) for e in self.episodes}
        return {
            "dataset": self.name,
            "groups": len(self.groups),
            "sessions": len(sessions),
            "episodes": len(self.episodes),
            "questions": len(self.questions),
            "questions_by_category": dict(sorted(by_cat.items())),
            "warnings": dict(self.warnings),
        }


class Hit(BaseModel):
    """One retrieved item with its final score and the score it got from each list that found it."""

    id: str
    kind: ItemKind
    score: float
    scores: dict[str, float] = Field(default_factory=dict)


class RetrievedContext(BaseModel):
    """What retrieval hands the answerer for one question: ranked items per type."""

    question_id: str
    group_id: str
    episodes: list[Hit] = Field(default_factory=list)
    entities: list[Hit] = Field(default_factory=list, description="entities and categories together")
    facts: list[Hit] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
