"""Mem0 baseline: the running conversation summary, refreshed every few messages (Mem0 paper §2.1).

The new summary folds the messages since the last refresh into the previous summary; it is the
global context of every later extraction prompt. Plain JSON with one string field. Our own wording.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.mem0_extract import message_line, span
from mnemis.types import Episode

MAX_SUMMARY_CHARS = 1200

SUMMARY_SYSTEM = (
    "You keep a running summary of a long conversation between people. Merge the new messages into the "
    "previous summary: who the people are, what happened to them and when, their plans, preferences and "
    "relationships. Keep concrete names and dates, drop small talk, stay under 200 words. Reply with JSON only."
)


class ConversationSummary(BaseModel):
    summary: str = Field(max_length=MAX_SUMMARY_CHARS, description="the updated summary of the whole conversation so far")


def render_mem0_summary(previous: str, messages: Sequence[Episode]) -> list[dict[str, str]]:
    """Messages asking to fold ``messages`` into the ``previous`` summary."""
    body = (
        f"Previous summary:\n{previous.strip() or '(none yet)'}\n\n"
        f"New messages (sent {span(messages)}):\n" + "\n".join(message_line(e) for e in messages) + "\n\n"
        "Task: write the updated summary."
    )
    return [system(SUMMARY_SYSTEM), user(body)]


MEM0_SUMMARY = Prompt("mem0_summary", "v1", render_mem0_summary, ConversationSummary)
