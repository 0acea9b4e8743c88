"""LoCoMo-Plus's cognitive judge, in our own words after the benchmark's ``Cognitive`` template.

The reply to a trigger message is checked against the earlier cue exchange it should remember: ``correct``
when the reply draws on the cue (explicitly or implicitly: it reflects the remembered fact, state, goal,
value or constraint), ``wrong`` when it shows no link to it. Upstream's template offers only these two
labels; with ``partial=True`` a third, ``partial`` (the reply is consistent with the cue but links to it only
vaguely), is allowed, and the scores are correct 1, partial 0.5, wrong 0 (upstream's score map).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from mnemis.prompts.base import Prompt, system, user

MAX_REASONING_CHARS = 400
LABEL_SCORE = {"correct": 1.0, "partial": 0.5, "wrong": 0.0}


def _trim(value: object) -> object:
    return value[:MAX_REASONING_CHARS] if isinstance(value, str) else value


class CueVerdict(BaseModel):
    """Whether a reply draws on the remembered exchange."""

    reasoning: str = Field(json_schema_extra={"maxLength": MAX_REASONING_CHARS},
                           description="one or two sentences: does the reply relate to the earlier exchange?")
    label: Literal["correct", "wrong"] = Field(description="correct or wrong")

    @field_validator("reasoning", mode="before")
    @classmethod
    def _trim_reasoning(cls, value: object) -> object:
        return _trim(value)


class CueVerdictPartial(BaseModel):
    """Whether a reply draws on the remembered exchange, with a partial grade."""

    reasoning: str = Field(json_schema_extra={"maxLength": MAX_REASONING_CHARS},
                           description="one or two sentences: does the reply relate to the earlier exchange?")
    label: Literal["correct", "partial", "wrong"] = Field(description="correct, partial or wrong")

    @field_validator("reasoning", mode="before")
    @classmethod
    def _trim_reasoning(cls, value: object) -> object:
        return _trim(value)


SYSTEM = (
    "Two people talk over many months. Some time ago they had a short exchange (the earlier exchange, "
    "below). Later one of them sent a new message, and a reply to it was written. Decide whether the reply "
    "shows that its writer remembers the earlier exchange: it uses, reflects or respects what was said "
    "there (a fact, a state of mind, a goal, a value or a constraint), openly or implicitly."
)
BINARY = (
    "Label it correct when there is a clear link to the earlier exchange, wrong when there is none (a "
    "generic reply that would fit anyone is wrong). Reply with JSON: "
    '{"reasoning": "<one or two sentences>", "label": "correct" | "wrong"}.'
)
GRADED = (
    "Label it correct when there is a clear link to the earlier exchange, partial when the reply is "
    "consistent with it but links to it only vaguely, wrong when there is no link (a generic reply that "
    'would fit anyone is wrong). Reply with JSON: {"reasoning": "<one or two sentences>", "label": '
    '"correct" | "partial" | "wrong"}.'
)


def _render(rules: str):
    def render(cue: str, trigger: str, reply: str) -> list[dict[str, str]]:
        """Messages asking whether ``reply`` (to ``trigger``) draws on the earlier exchange ``cue``."""
        body = f"Earlier exchange:\n{cue}\n\nNew message: {trigger}\nReply to check: {reply}\n\nLabel the reply."
        return [system(SYSTEM + "\n" + rules), user(body)]

    return render


JUDGE_LOCOMO_PLUS = Prompt("judge_locomo_plus", "v1", _render(BINARY), CueVerdict)
JUDGE_LOCOMO_PLUS_PARTIAL = Prompt("judge_locomo_plus_partial", "v1", _render(GRADED), CueVerdictPartial)
