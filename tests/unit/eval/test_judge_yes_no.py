"""LongMemEval judged as the official judges do in paper mode: one user message, a bare yes / no verdict,
temperature 0, a 10-token reply budget; a judge model that cannot write free text fails at start-up."""

from __future__ import annotations

import pytest

from mnemis.config import compose, to_plain
from mnemis.eval.judge import Judge, judge_one_llm
from mnemis.prompts.judge_longmemeval import parse_yes_no
from mnemis.roles import RoleError, check_roles
from mnemis.settings import load_settings
from tests.helpers.eval import make_question, scripted_llm, verdict


def _lme(i, **kw):
    return make_question(i, category="single-session-user", **kw)


@pytest.mark.parametrize(("text", "label"), [("yes", True), ("Yes.", True), ("**No**, it gives 2019", False),
                                              ("no", False), ("The answer is yes", None), ("", None)])
def test_parse_yes_no(text, label):
    assert parse_yes_no(text) is label


def test_yes_no_judge_sends_one_user_message_with_a_small_budget():
    replies = iter(["Yes", "no", "maybe"])
    llm, backend = scripted_llm(lambda req: next(replies))
    qs = [_lme(0), _lme(1), _lme(2)]
    labels = judge_one_llm(Judge(llm, "generous", "yes_no"), qs, ["Paris", "Rome", "Oslo"])
    assert labels == [True, False, None]  # an unusable verdict is a counted failure, not a guess
    for req in backend.batches[0]:
        assert [m["role"] for m in req.messages] == ["user"] and req.schema_ is None
        assert "yes or no only" in req.messages[0]["content"]
        assert (req.sampling.max_tokens, req.sampling.temperature) == (10, 0.0)


def test_reasoned_judge_stays_the_default_and_locomo_is_unchanged():
    llm, backend = scripted_llm(lambda req: verdict("CORRECT"))
    judge_one_llm(Judge(llm, "strict", "yes_no"), [make_question(0)], ["Paris"])  # a LoCoMo question
    assert backend.batches[0][0].schema_ is not None  # LoCoMo keeps its JSON verdict whatever the LME format
    assert Judge(llm).lme_format == "reasoned"
    with pytest.raises(ValueError, match="longmemeval_format"):
        Judge(llm, "strict", "short")


def test_paper_mode_uses_yes_no_and_a_schema_only_judge_fails_naming_the_key():
    plain = load_settings(to_plain(compose(["experiment=paper_lme_s", "+llm@judge_llms.paper=schema_fake"])))
    assert plain.judge.longmemeval_format == "yes_no"
    with pytest.raises(RoleError, match=r"judge_llms\.paper .*SchemaFakeBackend.*longmemeval_format=reasoned"):
        check_roles(plain)
    check_roles(load_settings(to_plain(compose(["experiment=paper_lme_s", "+llm@judge_llms.paper=schema_fake",
                                                "judge.longmemeval_format=reasoned"]))))  # passes
    assert load_settings(to_plain(compose([]))).judge.longmemeval_format == "reasoned"
