"""LoCoMo judge (our wording of the generous CORRECT/WRONG judge used across the literature, REFERENCE §7).

Generous on paraphrase, extra detail and date formats; category-5 (adversarial) questions are
unanswerable by construction, so there the answer is CORRECT only when it declines or says the
information is not mentioned. The reply schema is shared with the LongMemEval judge.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from mnemis.prompts.base import Prompt, system, user

ADVERSARIAL = "adversarial"
MAX_REASONING_CHARS = 400


class JudgeVerdict(BaseModel):
    """A judge's decision on one answer."""

    # maxLength bounds decoding; a longer reasoning (a backend without constrained decoding) is trimmed,
    # never a failure: the label is what counts
    reasoning: str = Field(json_schema_extra={"maxLength": MAX_REASONING_CHARS},
                           description="one or two sentences comparing the answer with the gold answer")
    label: Literal["CORRECT", "WRONG"] = Field(description="CORRECT or WRONG")

    @field_validator("reasoning", mode="before")
    @classmethod
    def _trim(cls, value: object) -> object:
        return value[:MAX_REASONING_CHARS] if isinstance(value, str) else value


JUDGE_SYSTEM = (
    "You grade answers to questions about a long conversation. Compare the generated answer with "
    "the gold answer and decide whether it is CORRECT or WRONG. Reply with JSON: "
    '{"reasoning": "<one or two sentences>", "label": "CORRECT" | "WRONG"}.'
)

GENEROUS_RULES = (
    "Be generous: the answer is CORRECT if it states the same fact or refers to the same thing as the "
    "gold answer, even if it is longer, worded differently, or adds extra details. Dates count as the "
    "same in any format ('7 May 2023', '2023-05-07', 'May 7th'), and a relative date that resolves "
    "to the gold date is also CORRECT. The answer is WRONG if it gives a different fact, a different "
    "time period, misses the point of the gold answer, or says the information is not available."
)

ADVERSARIAL_RULES = (
    "This question cannot be answered from the conversation: it presupposes something the "
    "conversation does not say (for example it attributes an event to the wrong person). The "
    "answer is CORRECT only if it declines, says the information is not mentioned or unknown, or "
    "points out the false premise. It is WRONG if it commits to a specific answer"
)


def render_judge_locomo(question: str, gold: str, answer: str, category: str) -> list[dict[str, str]]:
    """Messages asking whether ``answer`` is correct; ``category`` selects the adversarial rule."""
    if category == ADVERSARIAL:
        rules = ADVERSARIAL_RULES + (f", such as \"{gold}\"." if gold.strip() else ".")
        body = f"{rules}\n\nQuestion: {question}\nGenerated answer: {answer}\n"
    else:
        body = f"{GENEROUS_RULES}\n\nQuestion: {question}\nGold answer: {gold}\nGenerated answer: {answer}\n"
    return [system(JUDGE_SYSTEM), user(body + "\nGrade the generated answer.")]


JUDGE_LOCOMO = Prompt("judge_locomo", "v1", render_judge_locomo, JudgeVerdict)
