"""Answer prompts (the paper; our own wording), a small registry chosen by config, and the reply reader.

Replies are **plain text** (no schema): robust to truncation at ``max_tokens`` and what the judges grade.
The question date is given so relative phrases ("last week") can be resolved; for LoCoMo it is the time
of the last session. No prompt sees anything about a question but its text and its date, never a gold
label of the benchmark: every question gets the same instructions. Three prompts
(``answer.prompt``, per method ``answer.prompt_by_method``):

* ``terse`` (the tuned default): only the memories, no guessing, "not mentioned" when the answer or the
  question's premise is unsupported, the answer first and at most two sentences.
* ``paper``: the shape of the paper's graded answers (the authors' 60 human-evaluated LoCoMo replies mostly
  lead with the answer, then give the memories that support it, with their dates): the answer in one
  sentence first, then the supporting memories. Inference and common knowledge are allowed when the question
  asks what would, might or is likely to be; "not mentioned" only when nothing in the memories relates.
* ``mem0``: after the Mem0 authors' evaluation prompt: read both speakers' memories, prefer the most
  recent memory on conflicts, turn relative times into dates from the timestamps, answer in a few words.

Each prompt says what the judges grade (``graded``: the whole reply for ``paper``, as the paper's judge
graded the whole reply of its answer prompt; the short answer otherwise) and where the short answer that the
lexical scores (token F1, BLEU-1, LoCoMo F1) compare with the gold is read (``span``): the whole reply
(``terse``), the text after the last "Answer:" line (``mem0``), or the first sentence (``paper``; an explicit
"Answer:" line wins when the model wrote one). :func:`read_answer` does the reading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from mnemis.prompts.base import Prompt, system, user
from mnemis.render import format_timestamp

if TYPE_CHECKING:
    from mnemis.settings import AnswerSettings

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

PAPER_SYSTEM = (
    "You answer questions about a person's past conversations. You are given the memories retrieved "
    "for the question: entities and facts with the dates they hold, and conversation messages with "
    "their timestamps.\n"
    "How to answer:\n"
    "1. Begin with the answer itself, in one sentence that can stand on its own.\n"
    "2. Then give the memories that support it, each with its date, and say how they lead to the answer "
    "when it takes more than one.\n"
    "3. Every memory carries a date. Resolve relative expressions such as 'yesterday', 'last week' or "
    "'next month' against the date of the memory that contains them, and state absolute dates or "
    "periods (e.g. '7 May 2023', 'the week before 9 June 2023').\n"
    "4. When the question asks what would, might, could or is likely to be the case, infer the most "
    "plausible answer from what the memories show about the people (interests, habits, circumstances), "
    "using common knowledge where needed, and commit to it.\n"
    "5. When the memories do not state the answer word for word, give the best answer they support. "
    "Only when nothing in the memories relates to the question, say that it is not mentioned."
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

def _body(context: str, question: str, question_date: datetime | None) -> str:
    when = format_timestamp(question_date) if question_date is not None else "unknown"
    return (f"# Memories\n{context.strip() or '(no memories retrieved)'}\n\n"
            f"# Question (asked on {when})\n{question.strip()}")


def render_answer(context: str, question: str, question_date: datetime | None = None) -> list[dict[str, str]]:
    """``terse``: answer ``question`` from the rendered memory ``context``."""
    return [system(ANSWER_SYSTEM), user(_body(context, question, question_date) + "\n\nAnswer:")]


def _with_closing(system_text: str, closing: str):
    def render(context: str, question: str, question_date: datetime | None = None) -> list[dict[str, str]]:
        return [system(system_text), user(_body(context, question, question_date) + "\n\n" + closing)]

    return render


render_answer_paper = _with_closing(PAPER_SYSTEM, "Give the answer first, then the memories that support it.")
render_answer_mem0 = _with_closing(MEM0_SYSTEM, "Work through the memories briefly, then give the 'Answer:' line.")

SPANS = ("whole", "answer_line", "first_sentence")  # where the short answer of a reply is read
GRADED = ("answer", "reply")  # what the judges grade


@dataclass(frozen=True)
class AnswerPrompt(Prompt):
    """An answer prompt plus how its reply is read: ``span`` (where the short answer is) and ``graded``
    (what the judges see: the short ``answer`` or the whole ``reply``)."""

    span: str = "whole"
    graded: str = "answer"

    def __post_init__(self) -> None:
        if self.span not in SPANS or self.graded not in GRADED:
            raise ValueError(f"answer prompt {self.name}: span {self.span!r} / graded {self.graded!r}")


ANSWER = AnswerPrompt("answer", "v1", render_answer, None, span="whole", graded="answer")
ANSWER_PAPER = AnswerPrompt("answer_paper", "v2", render_answer_paper, None, span="first_sentence", graded="reply")
ANSWER_MEM0 = AnswerPrompt("answer_mem0", "v1", render_answer_mem0, None, span="answer_line", graded="answer")
ANSWER_PROMPTS: dict[str, AnswerPrompt] = {"terse": ANSWER, "paper": ANSWER_PAPER, "mem0": ANSWER_MEM0}


def answer_prompt(name: str, key: str = "answer.prompt") -> AnswerPrompt:
    """The registered answer prompt ``name``; an unknown name is an error naming the config ``key``."""
    try:
        return ANSWER_PROMPTS[name]
    except KeyError:
        raise ValueError(f"{key}={name!r}: choose one of {sorted(ANSWER_PROMPTS)}") from None


def answer_prompt_for(answer: AnswerSettings, method: str) -> AnswerPrompt:
    """The prompt a method answers with: ``answer.prompt_by_method[method]``, else ``answer.prompt``."""
    if method in answer.prompt_by_method:
        return answer_prompt(answer.prompt_by_method[method], f"answer.prompt_by_method.{method}")
    return answer_prompt(answer.prompt)


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


# a sentence ends at . ! ? followed by space and a capital, a digit or a quote (not "e.g. the", "Dr. Smith" stays
# whole only when lower case follows; good enough for a short answer that the judges never see)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[*])")


def first_sentence(reply: str) -> str:
    """The first sentence of ``reply``'s first non-empty line (``<think>`` and markdown emphasis removed)."""
    text = _THINK.sub("", reply or "").strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = re.sub(r"^[#>*_\-\s]+", "", line)
    first = _SENTENCE_END.split(line, maxsplit=1)[0]
    return re.sub(r"[*_]{2,}", "", first).strip()


def read_answer(reply: str, span: str) -> tuple[str, str]:
    """``(short answer, span used)`` of ``reply`` read by ``span``: ``whole`` (the reply without a think
    block), ``answer_line`` (after its last "Answer:" line; the whole reply when it has none) or
    ``first_sentence`` (an explicit "Answer:" line when there is one, else the first sentence)."""
    if span not in SPANS:
        raise ValueError(f"answer span {span!r}: choose one of {SPANS}")
    if span == "whole":
        return _THINK.sub("", reply or "").strip(), "whole"
    answer, found = extract_answer(reply)
    if found:
        return (first_sentence(answer) if span == "first_sentence" else answer), "answer_line"
    if span == "answer_line":
        return answer, "whole"
    return first_sentence(reply), "first_sentence"
