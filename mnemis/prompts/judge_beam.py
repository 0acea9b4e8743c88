"""BEAM's judges, in our own words after the benchmark's evaluation (``src/evaluation`` of its repository).

* ``JUDGE_BEAM_RUBRIC``: one rubric item against one reply: 1 (the requirement is fully met), 0.5 (partly
  met), 0 (not met, or the reply does not address the question). Meaning counts, not wording; style only
  when the item is about format; a prohibition is met only by a reply that addresses the question without
  the forbidden element. The question's score is the mean over its items (``mnemis.eval.beam_score``).
* ``JUDGE_BEAM_SAME_EVENT``: whether two short texts describe the same event or fact: the alignment of an
  event-ordering reply's lines with the reference items, asked pair by pair as upstream does.

The judge sees the question, the rubric item and the reply (the upstream prompt template has a question slot
that its code never fills; ours fills it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from mnemis.prompts.base import Prompt, system, user

MAX_REASONING_CHARS = 400


class RubricVerdict(BaseModel):
    """A grader's score of one reply against one rubric item."""

    reasoning: str = Field(json_schema_extra={"maxLength": MAX_REASONING_CHARS},
                           description="one or two sentences on whether the requirement is met")
    score: Literal[0.0, 0.5, 1.0] = Field(description="1 fully met, 0.5 partly met, 0 not met")

    @field_validator("reasoning", mode="before")
    @classmethod
    def _trim(cls, value: object) -> object:
        return value[:MAX_REASONING_CHARS] if isinstance(value, str) else value


class SameEvent(BaseModel):
    """Whether two texts describe the same event or fact."""

    same: bool = Field(description="true when both texts describe the same event or fact")


RUBRIC_SYSTEM = (
    "You check one requirement against a chat assistant's reply to a user who asked about their earlier "
    "conversations with it. Score 1 when the reply fully meets the requirement, 0.5 when it partly meets it "
    "(the required element is there but incomplete or slightly wrong; a prohibition mostly respected with a "
    "minor slip), 0 when it does not meet it. A reply that does not address the question scores 0 whatever "
    "else it says.\n"
    "Judge meaning, not wording: paraphrases and synonyms count, and numbers, amounts, durations and dates "
    "count in any equivalent form ('$68,000', '68k', 'sixty-eight thousand dollars'). Ignore tone, length "
    "and hedging unless the requirement itself is about format or structure.\n"
    "Some requirements forbid something ('no', 'not', 'avoid', 'without'): such a requirement is met only "
    "when the reply addresses the question and leaves the forbidden element out. A requirement that joins "
    "several elements is fully met only when all of them are there; some of them is a partial score.\n"
    'Reply with JSON: {"reasoning": "<one or two sentences>", "score": 1 | 0.5 | 0}.'
)


def render_rubric(question: str, item: str, reply: str) -> list[dict[str, str]]:
    """Messages scoring ``reply`` (to ``question``) against one rubric ``item``."""
    body = f"Question: {question}\nRequirement: {item}\nReply to check:\n{reply}\n\nScore the reply on this requirement."
    return [system(RUBRIC_SYSTEM), user(body)]


SAME_SYSTEM = (
    "You compare two short texts and decide whether they describe the same event or fact (the same "
    "thing happening or being said, in any wording). Reply with JSON: {\"same\": true | false}."
)


def render_same_event(reference: str, candidate: str) -> list[dict[str, str]]:
    """Messages asking whether ``candidate`` (a line of a reply) describes the ``reference`` item."""
    return [system(SAME_SYSTEM), user(f"First text: {reference}\nSecond text: {candidate}\n\nSame event or fact?")]


JUDGE_BEAM_RUBRIC = Prompt("judge_beam_rubric", "v1", render_rubric, RubricVerdict)
JUDGE_BEAM_SAME_EVENT = Prompt("judge_beam_same_event", "v1", render_same_event, SameEvent)
