"""Answer prompts (REFERENCE §6-§7; our own wording), a small registry chosen by config, and the reply reader.

Replies are **plain text** (no schema): robust to truncation at ``max_tokens`` and what the judges grade.
The question date is given so relative phrases ("last week") can be resolved; for LoCoMo it is the time
of the last session. Three prompts (``answer.prompt``, per method ``answer.prompt_by_method``):

* ``terse`` (the tuned default): only the memories, no guessing, "not mentioned" when the answer or the
  question's premise is unsupported, the answer first and at most two sentences.
* ``paper``: the paper's answer style (its answers reason over dated messages and facts first, then
  answer). Inference and common knowledge are allowed when the question asks what would, might or is
  likely to be; there is no premise rule, except for LoCoMo category 5 (adversarial), whose questions
  rest on false premises by construction and where declining is the correct answer (LoCoMo's own QA
  protocol also prompts that category with a "not mentioned" option).
* ``mem0``: after the Mem0 authors' evaluation prompt: read both speakers' memories, prefer the most
  recent memory on conflicts, turn relative times into dates from the timestamps, answer in a few words.

``extract_answer`` reads a reasoning-first reply: the answer is what follows its last "Answer:" line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from mnemis.eval.render import format_timestamp
from mnemis.prompts.base import Prompt, system, user

NOT_MENTIONED = "This is not mentioned in the memories."
ADVERSARIAL = "adversarial"

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

PAPER_SYSTEM = (
    "You answer questions about a person's past conversations. You are given the memories retrieved "
    "for the question: entities and facts with the dates they hold, and conversation messages with "
    "their timestamps.\n"
    "How to answer:\n"
    "1. First reason over the memories that bear on the question: name the relevant ones with their "
    "dates and work out what they show together.\n"
    "2. Every memory carries a date. Resolve relative expressions such as 'yesterday', 'last week' or "
    "'next month' against the date of the memory that contains them, and state absolute dates or "
    "periods (e.g. '7 May 2023', 'the week before 9 June 2023').\n"
    "3. When the question asks what would, might, could or is likely to be the case, infer the most "
    "plausible answer from what the memories show about the people (interests, habits, circumstances), "
    "using common knowledge where needed, and commit to it.\n"
    "4. When the memories do not state the answer word for word, give the best answer they support. "
    "Only when nothing in the memories relates to the question, say that it is not mentioned.\n"
    "5. Finish with one line that starts with 'Answer:' followed by the answer itself: short and "
    "specific (a phrase or one sentence)."
)

MEM0_SYSTEM = (
    "You answer questions from memories extracted from a conversation between two people. Each memory "
    "carries a timestamp.\n"
    "1. Read every memory related to the question, from both people.\n"
    "2. Use the timestamps: when memories disagree, trust the most recent one.\n"
    "3. Turn relative time references into specific dates, months or years using the timestamp of the "
    "memory they appear in (a memory dated 4 May 2022 that says 'last year' means 2021). Never answer "
    "with a relative reference.\n"
    "4. Do not confuse people named inside a memory with the two speakers. Relations between people and "
    "things, when listed after the memories, are evidence of the same kind.\n"
    "5. The answer is very short: at most six words.\n"
    "Think it through briefly, then finish with one line 'Answer: <the answer>'."
)

ADVERSARIAL_RULE = (
    "This question may rest on a premise the memories do not support (for example it attributes an "
    "event to the wrong person). If the memories do not support it, finish with "
    f"'Answer: {NOT_MENTIONED}'"
)


def _body(context: str, question: str, question_date: datetime | None) -> str:
    when = format_timestamp(question_date) if question_date is not None else "unknown"
    return (f"# Memories\n{context.strip() or '(no memories retrieved)'}\n\n"
            f"# Question (asked on {when})\n{question.strip()}")


def render_answer(context: str, question: str, question_date: datetime | None = None,
                  category: str | None = None) -> list[dict[str, str]]:
    """``terse``: answer ``question`` from the rendered memory ``context`` (``category`` is not used)."""
    return [system(ANSWER_SYSTEM), user(_body(context, question, question_date) + "\n\nAnswer:")]


def _reasoning_first(system_text: str, closing: str):
    def render(context: str, question: str, question_date: datetime | None = None,
               category: str | None = None) -> list[dict[str, str]]:
        rules = system_text + ("\n" + ADVERSARIAL_RULE if category == ADVERSARIAL else "")
        return [system(rules), user(_body(context, question, question_date) + "\n\n" + closing)]

    return render


render_answer_paper = _reasoning_first(
    PAPER_SYSTEM, "Reason over the dated memories first, then give the final 'Answer:' line.")
render_answer_mem0 = _reasoning_first(MEM0_SYSTEM, "Work through the memories briefly, then give the 'Answer:' line.")

ANSWER = Prompt("answer", "v1", render_answer, None)
ANSWER_PAPER = Prompt("answer_paper", "v1", render_answer_paper, None)
ANSWER_MEM0 = Prompt("answer_mem0", "v1", render_answer_mem0, None)
ANSWER_PROMPTS: dict[str, Prompt] = {"terse": ANSWER, "paper": ANSWER_PAPER, "mem0": ANSWER_MEM0}


def answer_prompt(name: str, key: str = "answer.prompt") -> Prompt:
    """The registered answer prompt ``name``; an unknown name is an error naming the config ``key``."""
    try:
        return ANSWER_PROMPTS[name]
    except KeyError:
        raise ValueError(f"{key}={name!r}: choose one of {sorted(ANSWER_PROMPTS)}") from None


def answer_prompt_for(answer_cfg: Mapping[str, object] | None, method: str) -> Prompt:
    """The prompt a method answers with: ``answer.prompt_by_method[method]``, else ``answer.prompt``."""
    cfg = answer_cfg or {}
    by_method = cfg.get("prompt_by_method") or {}
    if method in by_method:  # type: ignore[operator]
        return answer_prompt(str(by_method[method]), f"answer.prompt_by_method.{method}")  # type: ignore[index]
    return answer_prompt(str(cfg.get("prompt") or "terse"))


_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S | re.I)
# "Answer:", "Final answer:", "**Answer:**", "### Answer:" at the start of a line
_ANSWER_LINE = re.compile(r"^[ \t>#*_-]*(?:final[ \t]+)?answer[ \t]*[*_]*[ \t]*[:：][ \t]*[*_]*[ \t]*", re.I | re.M)


def extract_answer(reply: str) -> tuple[str, bool]:
    """``(answer, found)``: the text after the reply's last "Answer:" line marker (``found`` True), or
    the whole reply when it has none (e.g. a terse reply, or one cut before its answer line).
    A ``<think>`` block is dropped first; markdown emphasis around the answer is removed."""
    text = _THINK.sub("", reply or "").strip()
    marks = list(_ANSWER_LINE.finditer(text))
    if not marks:
        return text, False
    answer = text[marks[-1].end():].strip()
    answer = re.sub(r"^[*_]+|[*_]+$", "", answer).strip()
    if not answer:  # a marker with nothing after it: keep the reply rather than an empty answer
        return text, False
    return answer, True
