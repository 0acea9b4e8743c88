"""LoCoMo judges: two grading criteria for the CORRECT/WRONG judge (the paper), in our own words.

* ``generous`` (``JUDGE_LOCOMO_GENEROUS``): the criterion of the widely used Mem0 judge behind the
  paper's table: an answer is CORRECT when it touches on the same topic or fact as the gold answer, and
  dates are read generously (same date or period, any format, relative references that land on it).
* ``strict`` (``JUDGE_LOCOMO``, this project's own): generous on wording, detail and date formats, but
  the answer must state the same fact or refer to the same thing; missing the point is WRONG.

Both share the category-5 (adversarial) rule: those questions are unanswerable by construction, so the
answer is CORRECT only when it declines or says the information is not mentioned. The reply schema is
shared with the LongMemEval judge. ``mnemis.eval.leniency`` measures each criterion on the stress set.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from mnemis.prompts.base import Prompt, system, user

ADVERSARIAL = "adversarial"


# The reasoning length steers decoding only: a longer reasoning (from a backend that does not enforce the
# schema) is cut, never a failed verdict. (The class docstring is part of the schema, hence of the
# response-cache key: keep it unchanged.)
MAX_REASONING_CHARS = 400


class JudgeVerdict(BaseModel):
    """A judge's decision on one answer."""

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

STRICT_RULES = (
    "Be generous: the answer is CORRECT if it states the same fact or refers to the same thing as the "
    "gold answer, even if it is longer, worded differently, or adds extra details. Dates count as the "
    "same in any format ('7 May 2023', '2023-05-07', 'May 7th'), and a relative date that resolves "
    "to the gold date is also CORRECT. The answer is WRONG if it gives a different fact, a different "
    "time period, misses the point of the gold answer, or says the information is not available."
)
GENEROUS_RULES = (
    "The question asks about something one speaker should know about the other from their past "
    "conversations. The gold answer is usually short; the generated answer may be much longer. Grade "
    "generously: if the generated answer touches on the same topic or fact as the gold answer, it is "
    "CORRECT. For a question about time, the answer is CORRECT if it refers to the same date or period "
    "as the gold answer, whatever the format ('May 7th' or '7 May 2023') and even when it uses a relative "
    "reference ('the week before', 'last Tuesday') that points to it. The answer is WRONG only if it is "
    "about a different thing or a different time, or gives no answer."
)

ADVERSARIAL_RULES = (
    "This question cannot be answered from the conversation: it presupposes something the "
    "conversation does not say (for example it attributes an event to the wrong person). The "
    "answer is CORRECT only if it declines, says the information is not mentioned or unknown, or "
    "points out the false premise. It is WRONG if it commits to a specific answer"
)


def _renderer(rules_1_to_4: str):
    def render(question: str, gold: str, answer: str, category: str) -> list[dict[str, str]]:
        """Messages asking whether ``answer`` is correct; ``category`` selects the adversarial rule."""
        if category == ADVERSARIAL:
            rules = ADVERSARIAL_RULES + (f", such as \"{gold}\"." if gold.strip() else ".")
            body = f"{rules}\n\nQuestion: {question}\nGenerated answer: {answer}\n"
        else:
            body = f"{rules_1_to_4}\n\nQuestion: {question}\nGold answer: {gold}\nGenerated answer: {answer}\n"
        return [system(JUDGE_SYSTEM), user(body + "\nGrade the generated answer.")]

    return render


render_judge_locomo = _renderer(STRICT_RULES)
render_judge_locomo_generous = _renderer(GENEROUS_RULES)

JUDGE_LOCOMO = Prompt("judge_locomo", "v1", render_judge_locomo, JudgeVerdict)
JUDGE_LOCOMO_GENEROUS = Prompt("judge_locomo_generous", "v1", render_judge_locomo_generous, JudgeVerdict)
LOCOMO_CRITERIA: dict[str, Prompt] = {"generous": JUDGE_LOCOMO_GENEROUS, "strict": JUDGE_LOCOMO}
