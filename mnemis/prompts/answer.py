"""Answer generation from retrieved memories (REFERENCE §6-§7; our own wording).

Reply format: **plain text** (no schema). The answer is the whole reply: a direct answer first, at
most a few sentences. Plain text is robust to truncation at ``max_tokens`` (a truncated JSON reply
would be a failed item) and is what the LoCoMo/LME judges grade. The question date is given so
relative phrases ("last week") can be resolved; for LoCoMo it is the time of the last session.
"""

from __future__ import annotations

from datetime import datetime

from mnemis.eval.render import format_timestamp
from mnemis.prompts.base import Prompt, system, user

NOT_MENTIONED = "This is not mentioned in the memories."

ANSWER_SYSTEM = (
    "You answer questions about a user's past conversations using only the memories provided.\n"
    "Rules:\n"
    "1. Use only the information in the memories. Do not guess or use outside knowledge, except "
    "common sense needed to interpret what the memories say.\n"
    "2. Every memory carries a timestamp. Resolve relative expressions such as 'yesterday', 'last "
    "week' or 'next month' against the timestamp of the memory that contains them, and give "
    "absolute dates (e.g. '7 May 2023', 'the week before 9 June 2023').\n"
    "3. If the memories do not contain the answer, or the question assumes something the memories "
    f"do not support, reply: \"{NOT_MENTIONED}\"\n"
    "4. Start with the answer itself, then at most two short sentences of justification. Be concise."
)


def render_answer(context: str, question: str, question_date: datetime | None = None) -> list[dict[str, str]]:
    """Messages asking to answer ``question`` from the rendered memory ``context``."""
    when = format_timestamp(question_date) if question_date is not None else "unknown"
    body = (
        f"# Memories\n{context.strip() or '(no memories retrieved)'}\n\n"
        f"# Question (asked on {when})\n{question.strip()}\n\nAnswer:"
    )
    return [system(ANSWER_SYSTEM), user(body)]


ANSWER = Prompt("answer", "v1", render_answer, None)
