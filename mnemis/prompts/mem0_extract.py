"""Mem0 baseline: salient-fact extraction from one new message pair (Mem0 paper, arXiv 2504.19413, §2.1).

The prompt holds three kinds of context, in this order: the running conversation summary, the last
``m`` messages before the pair, and the pair itself; every message carries its own time (weekday
included). Only the pair is mined; the rest resolves who and what it refers to. Facts are
self-contained sentences naming the person they are about, with any relative time ("yesterday")
turned into an absolute date using that message's time. With one memory per speaker (as the Mem0
LoCoMo evaluation keeps them) the prompt names the speaker whose memory is being written, and only
that speaker's own new messages are mined. Our own wording.

The length bounds (``maxItems`` = ``max_facts``, ``maxLength`` per fact) steer constrained decoding
only; validation never rejects a longer reply: the extraction stage trims and counts instead.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, Field, create_model

from mnemis.prompts.base import Prompt, bare_list_as, system, user
from mnemis.render import format_episode
from mnemis.types import Episode

MAX_FACTS = 8
MAX_FACT_CHARS = 300

EXTRACT_SYSTEM = (
    "You maintain a long-term memory of a conversation. From the NEW MESSAGES only, write down the facts "
    "worth remembering about the people in it: events, plans, preferences, relationships, possessions, "
    "jobs, places, dates, feelings about specific things. Each fact is one short self-contained sentence "
    "that names the person it is about (never 'I', 'he' or 'she'). Turn relative times such as 'yesterday' "
    "or 'last week' into dates using the time of the message that says it. Skip greetings and small talk. "
    "Reply with JSON only."
)

_FACT = Annotated[str, Field(json_schema_extra={"maxLength": MAX_FACT_CHARS})]


class CandidateFacts(BaseModel):
    """Salient facts stated in the new messages."""

    facts: list[_FACT] = Field(
        default_factory=list, json_schema_extra={"maxItems": MAX_FACTS},
        description="facts from the new messages, one self-contained sentence each; empty if nothing is worth "
                    "remembering")
    _accept_bare_list = bare_list_as("facts")


@functools.lru_cache(maxsize=32)
def candidate_facts_schema(max_facts: int) -> type[CandidateFacts]:
    """``CandidateFacts`` whose ``maxItems`` steering is ``max_facts`` (the config's cap, not a fixed 8)."""
    if max_facts == MAX_FACTS:
        return CandidateFacts
    field = Field(default_factory=list, json_schema_extra={"maxItems": int(max_facts)},
                  description=CandidateFacts.model_fields["facts"].description)
    return create_model(f"CandidateFacts{int(max_facts)}", __base__=CandidateFacts, facts=(list[_FACT], field))


def message_line(e: Episode) -> str:
    """``[2023/05/08 (Mon) 13:56] Caroline: text``: one message with its own time."""
    return format_episode(e)


def render_mem0_extract(summary: str, recent: Sequence[Episode], pair: Sequence[Episode],
                        speaker: str | None = None) -> list[dict[str, str]]:
    """Messages asking for the salient facts of ``pair`` (``recent`` = the ``m`` earlier messages);
    with ``speaker``, only the facts ``speaker`` states in their own new messages."""
    parts = [f"Conversation summary:\n{summary.strip() or '(none yet)'}"]
    if recent:
        parts.append("Recent messages:\n" + "\n".join(message_line(e) for e in recent))
    parts.append("NEW MESSAGES:\n" + "\n".join(message_line(e) for e in pair))
    if speaker:
        parts.append(f"Task: you are writing the memory of {speaker}. List the facts worth remembering that "
                     f"{speaker} states in {speaker}'s own NEW MESSAGES; the other messages are context only.")
    else:
        parts.append("Task: list the facts worth remembering from the NEW MESSAGES.")
    return [system(EXTRACT_SYSTEM), user("\n\n".join(parts))]


MEM0_EXTRACT = Prompt("mem0_extract", "v2", render_mem0_extract, CandidateFacts)
