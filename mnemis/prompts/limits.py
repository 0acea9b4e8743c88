"""How much of its input a base-graph prompt shows, and how long its reply may be (``ingest.prompt_limits``).

Our defaults keep extraction prompts short for small models: earlier messages cut to 40 words, at most 10
names and 8 facts per reply, facts dated by day, and a resolution prompt that shows 60 words of the message
and 15 words of each candidate's summary. ``mode=paper`` sets every limit to ``None`` and dates facts with
ISO 8601 date-times, as the authors' LoCoMo ingestion through Graphiti's ``add_episode`` did (whole previous
episodes in the context, no cap on the names or facts of a reply).

A limit of ``None`` never leaves a decoding schema unbounded: the bound then follows the rendered input
(:func:`names_bound`, :func:`facts_bound`), so a reply budget (``max_tokens: auto``) still exists.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class PromptLimits(BaseModel):
    """Per-prompt limits of the base-graph stages (``None`` = no limit of ours)."""

    model_config = {"extra": "forbid", "frozen": True}

    context_words: int | None = Field(40, ge=1, description="words kept of each earlier message shown as context")
    max_names: int | None = Field(10, ge=1, description="names per extraction reply")
    max_facts: int | None = Field(8, ge=1, description="facts per extraction reply")
    fact_dates: Literal["day", "datetime"] = Field("day", description="valid_at / invalid_at precision asked for")
    message_words: int | None = Field(60, ge=1, description="resolution prompt: words of the message")
    summary_words: int | None = Field(15, ge=1, description="resolution prompt: words of a candidate's summary")


DEFAULT_LIMITS = PromptLimits()
PAPER_LIMITS = PromptLimits(context_words=None, max_names=None, max_facts=None, fact_dates="datetime",
                            message_words=None, summary_words=None)


def names_bound(limits: PromptLimits, message: str) -> int:
    """The most names one extraction reply may hold: ``limits.max_names``, or with no limit the number of
    distinct words of the message (every name is named in it)."""
    if limits.max_names is not None:
        return limits.max_names
    return max(1, len({w.casefold() for w in message.split()}))


def facts_bound(limits: PromptLimits, n_names: int) -> int:
    """The most facts one reply may hold: ``limits.max_facts``, or with no limit one per ordered pair of the
    listed entities (a fact joins two different ones)."""
    if limits.max_facts is not None:
        return limits.max_facts
    return max(1, n_names * (n_names - 1))


def cut_words(text: str, words: int | None) -> str:
    """``text`` cut to ``words`` words (with an ellipsis when cut); ``None`` keeps it whole."""
    parts = text.split()
    if words is None or len(parts) <= words:
        return " ".join(parts)
    return " ".join(parts[:words]) + " ..."
