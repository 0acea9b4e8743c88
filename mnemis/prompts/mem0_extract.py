"""Mem0 baseline: salient-fact extraction from one new message pair (Mem0 paper, arXiv 2504.19413, §2.1).

The prompt holds three kinds of context, in this order: the running conversation summary, the last
``m`` messages before the pair, and the pair itself. Only the pair is mined; the rest resolves who and
what it refers to. Facts are self-contained sentences naming the person they are about, with any
relative time ("yesterday") turned into an absolute date using the message time. Our own wording.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.types import Episode

MAX_FACTS = 8
MAX_FACT_CHARS = 200

EXTRACT_SYSTEM = (
    "You maintain a long-term memory of a conversation. From the NEW MESSAGES only, write down the facts "
    "worth remembering about the people in it: events, plans, preferences, relationships, possessions, "
    "jobs, places, dates, feelings about specific things. Each fact is one short self-contained sentence "
    "that names the person it is about (never 'I', 'he' or 'she'). Turn relative times such as 'yesterday' "
    "or 'last week' into dates using the message time. Skip greetings, small talk and anything already "
    "obvious from the summary. Reply with JSON only."
)


def message_line(e: Episode) -> str:
    """``Caroline: text`` (speaker added when the content lacks it)."""
    text = " ".join(e.content.split())
    if e.speaker and not text.startswith(f"{e.speaker}:"):
        text = f"{e.speaker}: {text}"
    return text


def span(messages: Sequence[Episode]) -> str:
    """``2023-05-08 13:56`` or ``2023-05-08 13:56 to 2023-05-25 09:10``: when ``messages`` were sent."""
    if not messages:
        return "unknown time"
    first, last = (m.valid_at.strftime("%Y-%m-%d %H:%M") for m in (messages[0], messages[-1]))
    return first if first == last else f"{first} to {last}"


class CandidateFacts(BaseModel):
    """Salient facts stated in the new messages."""

    facts: list[Annotated[str, Field(max_length=MAX_FACT_CHARS)]] = Field(
        default_factory=list, max_length=MAX_FACTS,
        description="facts from the new messages, one self-contained sentence each; empty if nothing is worth "
                    "remembering")


def render_mem0_extract(summary: str, recent: Sequence[Episode], pair: Sequence[Episode]) -> list[dict[str, str]]:
    """Messages asking for the salient facts of ``pair`` (``recent`` = the ``m`` earlier messages)."""
    parts = [f"Conversation summary:\n{summary.strip() or '(none yet)'}"]
    if recent:
        parts.append("Recent messages:\n" + "\n".join(message_line(e) for e in recent))
    parts.append(f"NEW MESSAGES (sent {span(pair)}):\n" + "\n".join(message_line(e) for e in pair))
    parts.append("Task: list the facts worth remembering from the NEW MESSAGES.")
    return [system(EXTRACT_SYSTEM), user("\n\n".join(parts))]


MEM0_EXTRACT = Prompt("mem0_extract", "v1", render_mem0_extract, CandidateFacts)
