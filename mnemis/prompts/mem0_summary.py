"""Mem0 baseline: the running conversation summary (Mem0 paper §2.1).

The new summary folds the messages since the last refresh (each with its time) into the previous
summary; it is the global context of every later extraction prompt. Plain JSON with one string
field. The ``maxLength`` bound steers constrained decoding only: a longer reply is trimmed and
counted by the summary stage, never rejected. Our own wording.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.mem0_extract import message_line
from mnemis.types import Episode

SUMMARY_WORDS = 200
MAX_SUMMARY_CHARS = 2000  # ~ 200 words of 8 characters, plus slack: the trim limit, not the target

SUMMARY_SYSTEM = (
    "You keep a running summary of a long conversation between people. Merge the new messages into the "
    "previous summary: who the people are, what happened to them and when, their plans, preferences and "
    f"relationships. Keep concrete names and dates, drop small talk, stay under {SUMMARY_WORDS} words. "
    "Reply with JSON only."
)


class ConversationSummary(BaseModel):
    summary: str = Field(json_schema_extra={"maxLength": MAX_SUMMARY_CHARS},
                         description="the updated summary of the whole conversation so far")


def render_mem0_summary(previous: str, messages: Sequence[Episode]) -> list[dict[str, str]]:
    """Messages asking to fold ``messages`` into the ``previous`` summary."""
    body = (
        f"Previous summary:\n{previous.strip() or '(none yet)'}\n\n"
        "New messages:\n" + "\n".join(message_line(e) for e in messages) + "\n\n"
        "Task: write the updated summary."
    )
    return [system(SUMMARY_SYSTEM), user(body)]


MEM0_SUMMARY = Prompt("mem0_summary", "v2", render_mem0_summary, ConversationSummary)
