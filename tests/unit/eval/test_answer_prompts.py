"""Answer prompts: the registry and its config keys, what each prompt allows, and reading a
reasoning-first reply."""

from __future__ import annotations

import pytest

from mnemis.eval.answer import answer_questions
from mnemis.prompts.answer import (
    ANSWER,
    ANSWER_MEM0,
    ANSWER_PAPER,
    ANSWER_PROMPTS,
    NOT_MENTIONED,
    answer_prompt,
    answer_prompt_for,
    extract_answer,
    read_answer,
)
from mnemis.settings import AnswerSettings
from tests.helpers.eval import make_question, scripted_llm


def _text(msgs):
    return "\n".join(m["content"] for m in msgs)


def _answer(prompt, by_method):
    return AnswerSettings(prompt=prompt, prompt_by_method=by_method, max_tokens=256, temperature=0.0)


def test_registry_and_per_method_override():
    assert ANSWER_PROMPTS == {"terse": ANSWER, "paper": ANSWER_PAPER, "mem0": ANSWER_MEM0}
    cfg = _answer("paper", {"mem0": "mem0", "mem0g": "mem0"})
    assert answer_prompt_for(cfg, "mnemis") is ANSWER_PAPER and answer_prompt_for(cfg, "rag") is ANSWER_PAPER
    assert answer_prompt_for(cfg, "mem0") is ANSWER_MEM0 and answer_prompt_for(cfg, "mem0g") is ANSWER_MEM0
    assert answer_prompt_for(_answer("terse", {}), "mnemis") is ANSWER
    with pytest.raises(ValueError, match=r"answer\.prompt='long'"):
        answer_prompt("long")
    with pytest.raises(ValueError, match=r"answer\.prompt_by_method\.mem0='official'"):
        answer_prompt_for(_answer("paper", {"mem0": "official"}), "mem0")
    assert len({p.key for p in ANSWER_PROMPTS.values()}) == 3  # distinct cache / ledger identities


def test_terse_keeps_its_rules():
    t = _text(ANSWER.render("[2023/05/08 (Mon) 13:56] Ann: hi", "Who said hi?", None))
    assert "assumes something the memories do not support" in t and NOT_MENTIONED in t
    assert "Do not guess" in t and t.rstrip().endswith("Answer:")


def test_paper_prompt_answers_first_then_the_supporting_memories_and_allows_inference():
    q = "What would Caroline's political leaning likely be?"
    t = _text(ANSWER_PAPER.render("[2023/05/08 (Mon) 13:56] Caroline: I marched for equal rights", q, None))
    assert "Begin with the answer itself" in t and "memories that support it" in t
    assert "would, might, could or is likely to be" in t and "common knowledge" in t
    assert "Only when nothing in the memories relates to the question" in t  # one decline rule for every question
    assert "premise" not in t and "Do not guess" not in t and "'Answer:'" not in t
    assert "Caroline: I marched" in t and q in t
    assert (ANSWER_PAPER.span, ANSWER_PAPER.graded) == ("first_sentence", "reply")
    assert (ANSWER.graded, ANSWER_MEM0.graded) == ("answer", "answer")  # Mem0's rows grade the short answer


def test_no_prompt_takes_a_gold_label():
    for prompt in ANSWER_PROMPTS.values():
        with pytest.raises(TypeError):
            prompt.render("ctx", "q?", None, category="adversarial")


def test_mem0_prompt_short_recent_timestamps():
    t = _text(ANSWER_MEM0.render("- Ann moved to Oslo (2023-05-08)", "Where does Ann live?", None))
    assert "most recent" in t and "timestamp" in t and "at most six words" in t and "'Answer:" in t
    assert "premise" not in t


@pytest.mark.parametrize(("reply", "span", "answer", "used"), [
    ("Ann went to Paris in May 2023. This is based on her message of 8 May.", "first_sentence",
     "Ann went to Paris in May 2023.", "first_sentence"),
    ("Caroline gave the speech during the week before June 9, 2023.\n\nThis is supported by:\n- ...",
     "first_sentence", "Caroline gave the speech during the week before June 9, 2023.", "first_sentence"),
    ("**Sweden**, where she moved in 2019. Memories: ...", "first_sentence", "Sweden, where she moved in 2019.",
     "first_sentence"),
    ("Answer: Boston. Supporting memories: Ann lives in Boston (2023).", "first_sentence", "Boston.", "answer_line"),
    ("Reasoning first.\nAnswer: Paris", "answer_line", "Paris", "answer_line"),
    ("no marker here", "answer_line", "no marker here", "whole"),
    ("<think>x</think>Sweden. She moved.", "whole", "Sweden. She moved.", "whole"),
])
def test_read_answer(reply, span, answer, used):
    assert read_answer(reply, span) == (answer, used)


@pytest.mark.parametrize("reply,answer,found", [
    ("Memories from 7 May mention the trip.\nThe trip was the week before.\nAnswer: 30 April 2023",
     "30 April 2023", True),
    ("Let's analyze the timeline.\n**Answer:** Sweden", "Sweden", True),
    ("reasoning\n### Final answer: Paris and Rome\nWould you like more?", "Paris and Rome\nWould you like more?", True),
    ("<think>hmm, Answer: wrong</think>Answer: right", "right", True),
    ("Answer: first draft\nOn reflection...\nAnswer: second", "second", True),
    ("Answer:\nLikely liberal", "Likely liberal", True),
    ("Sweden. She moved there in 2019.", "Sweden. She moved there in 2019.", False),
    ("The answer: is not a marker line", "The answer: is not a marker line", False),
    ("reasoning cut before its answer line", "reasoning cut before its answer line", False),
    ("reasoning\nAnswer:   ", "reasoning\nAnswer:", False),
    ("", "", False),
])
def test_extract_answer(reply, answer, found):
    assert extract_answer(reply) == (answer, found)


def test_replies_are_kept_whole_read_by_span_and_graded_as_the_prompt_says():
    replies = {"q0": "Ann went to Paris on 7 May 2023. The memory of 8 May 2023 says so.", "q1": "Paris"}

    def responder(req):
        return replies["q0" if "person 0" in req.messages[-1]["content"] else "q1"]

    llm, backend = scripted_llm(responder)
    qs = [make_question(0), make_question(1, category="adversarial")]
    out = answer_questions(llm, qs, ["ctx a", "ctx b"], prompt=ANSWER_PAPER, max_tokens=512)
    assert [a.answer for a in out] == ["Ann went to Paris on 7 May 2023.", "Paris"]
    assert [a.reply for a in out] == [replies["q0"], "Paris"] and out[0].span == "first_sentence"
    assert out[0].graded_text == replies["q0"]  # the judges see the whole reply (the paper's judge did)
    reqs = backend.batches[0]
    assert reqs[0].messages[0] == reqs[1].messages[0]  # the same instructions whatever the category
    terse = answer_questions(scripted_llm(responder)[0], qs[:1], ["ctx a"], prompt=ANSWER)[0]
    assert terse.graded_text == terse.answer == replies["q0"]
