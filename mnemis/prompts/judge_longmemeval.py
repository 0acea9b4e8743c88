"""LongMemEval judge: type-specific rules (our wording of the official ``evaluate_qa.py`` criteria, the paper).

* single-session-user / single-session-assistant / multi-session: CORRECT if the response contains
  the gold answer (or an equivalent); a subset of a required list is WRONG.
* temporal-reasoning: the same, but day/week/month counts that are off by one are tolerated.
* knowledge-update: CORRECT if the updated (gold) answer is given, even alongside older information.
* single-session-preference: the gold answer is a rubric of the user's preferences; CORRECT if
  the response follows it (it need not cover every point).
* abstention (``_abs`` ids): CORRECT only if the response says it cannot answer / the information is missing.
"""

from __future__ import annotations

from mnemis.prompts.base import Prompt, system, user
from mnemis.prompts.judge_locomo import JudgeVerdict

JUDGE_SYSTEM = (
    "You grade a chat assistant's response to a question about its past conversations with the user. "
    "Decide whether the response is CORRECT or WRONG under the rule given. Reply with JSON: "
    '{"reasoning": "<one or two sentences>", "label": "CORRECT" | "WRONG"}.'
)

CONTAINS = (
    "The response is CORRECT if it contains the gold answer or an equivalent statement, even with "
    "extra details or intermediate steps. It is WRONG if it gives a different answer, only part of a "
    "required answer, or says the information is unavailable."
)
RULES = {
    "single-session-user": CONTAINS,
    "single-session-assistant": CONTAINS,
    "multi-session": CONTAINS,
    "temporal-reasoning": CONTAINS + (
        " Counts of days, weeks or months that are off by one from the gold answer (for example 18 "
        "days instead of 19) are still CORRECT."
    ),
    "knowledge-update": (
        "The user's information changed over time and the gold answer is the latest value. The "
        "response is CORRECT if it gives the updated (gold) answer, even if it also mentions older "
        "information. It is WRONG if it only gives outdated information or a different answer."
    ),
    "single-session-preference": (
        "The gold answer is a rubric describing the personalised response the user would want. The "
        "response is CORRECT if it follows the rubric and uses the user's stated preferences; it does "
        "not need to cover every point. It is WRONG if it ignores or contradicts them."
    ),
}
ABSTENTION = (
    "This question cannot be answered from the conversations (the gold answer explains why). The "
    "response is CORRECT if it says the question cannot be answered, the information was not "
    "mentioned, or points out the false premise. It is WRONG if it commits to a specific answer."
)


def render_judge_longmemeval(
    question: str, gold: str, answer: str, question_type: str, abstention: bool = False
) -> list[dict[str, str]]:
    """Messages grading ``answer`` with the rule of ``question_type`` (abstention overrides it)."""
    rule = ABSTENTION if abstention else RULES.get(question_type, CONTAINS)
    gold_label = "Rubric" if question_type == "single-session-preference" and not abstention else "Gold answer"
    body = (
        f"Rule: {rule}\n\nQuestion: {question}\n{gold_label}: {gold}\nResponse: {answer}\n\n"
        "Grade the response."
    )
    return [system(JUDGE_SYSTEM), user(body)]


JUDGE_LONGMEMEVAL = Prompt("judge_longmemeval", "v1", render_judge_longmemeval, JudgeVerdict)

# ------------------------------------------------------------------------------------------------ yes / no
# The official LongMemEval judges (``evaluate_qa.py``) ask for a bare verdict: one user message, "yes" or
# "no" only, temperature 0, a reply budget of a few tokens (``judge.longmemeval_format=yes_no``; mode=paper).
YES_NO_MAX_TOKENS = 10


def render_judge_longmemeval_yes_no(
    question: str, gold: str, answer: str, question_type: str, abstention: bool = False
) -> list[dict[str, str]]:
    """One user message asking for a yes/no verdict on ``answer`` under the rule of ``question_type``."""
    rule = ABSTENTION if abstention else RULES.get(question_type, CONTAINS)
    gold_label = "Rubric" if question_type == "single-session-preference" and not abstention else "Gold answer"
    body = (
        "I will give you a question, the correct answer (or a rubric) and a response from a chat assistant. "
        f"Decide whether the response is correct under this rule: {rule}\n\n"
        f"Question: {question}\n\n{gold_label}: {gold}\n\nResponse: {answer}\n\n"
        "Is the response correct? Answer yes or no only."
    )
    return [user(body)]


def parse_yes_no(text: str) -> bool | None:
    """The verdict of a yes/no reply: True (yes), False (no) or None (neither word comes first)."""
    words = "".join(ch if ch.isalpha() else " " for ch in (text or "").casefold()).split()
    first = words[0] if words else ""
    return True if first == "yes" else False if first == "no" else None


JUDGE_LONGMEMEVAL_YES_NO = Prompt("judge_longmemeval_yes_no", "v1", render_judge_longmemeval_yes_no, None)
