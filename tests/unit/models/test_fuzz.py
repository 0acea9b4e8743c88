"""Fuzz: malformed, truncated and schema-violating replies through validation (200 mutations in the default run,
CI's included, the full 1,200 in the ``slow`` run; the hypothesis test adds 40 generated batches)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemis.models.llm.client import LLM, parse_reply
from mnemis.models.llm.scripted import ScriptedBackend
from tests.helpers.models import GOOD, Facts, make_request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
GOOD_TEXT = json.dumps(GOOD)
FULL, QUICK = 1200, 200  # mutations: the slow run, the default run (the first 200 of the same stream)


def _mutations(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        k = rng.randrange(6)
        if k == 0:  # truncated
            out.append(GOOD_TEXT[: rng.randrange(len(GOOD_TEXT))])
        elif k == 1:  # random byte flips
            chars = list(GOOD_TEXT)
            for _ in range(rng.randint(1, 5)):
                chars[rng.randrange(len(chars))] = chr(rng.randrange(0, 0x2FF))
            out.append("".join(chars))
        elif k == 2:  # wrong types / enum values
            bad = json.loads(GOOD_TEXT)
            bad["facts"][0]["relation"] = rng.choice(["hates", 3, None, ""])
            bad["confidence"] = rng.choice([-1, 1.5, "high", None])
            out.append(json.dumps(bad))
        elif k == 3:  # unbalanced fences and prose
            out.append("```json\n" + GOOD_TEXT[: rng.randrange(1, len(GOOD_TEXT))])
        elif k == 4:  # deep nesting / huge numbers
            depth = rng.randint(1, 3000)
            out.append("[" * depth + "1e999999" + "]" * rng.randint(0, depth))
        else:  # control chars, surrogates, empty
            out.append(rng.choice(["", " ", "\x00", "\ud800", "null", "[]", "{}", "{" * 5, "}{", "\n```"]))
    return out


def _check_batch(replies: list[str]) -> None:
    it = iter(replies)
    be = ScriptedBackend(lambda r: next(it))
    llm = LLM(be, max_retries=0)
    res = llm.generate([make_request(i) for i in range(len(replies))])
    assert len(res) == len(replies)
    n_bad = sum(not r.ok for r in res)
    for text, r in zip(replies, res):
        assert (r.parsed is None) == (not r.ok)
        if not r.ok:
            assert isinstance(r.error, str) and r.error
        parsed, err = parse_reply(text, Facts)
        assert (err is None) == r.ok
    assert llm.ledger.stage("extract").failures == n_bad


def _fuzz(n: int) -> None:
    replies = _mutations(random.Random(1234), n)
    _check_batch(replies)
    # the mutation classes that can never be valid must all be counted as failures
    assert sum(parse_reply(t, Facts)[1] is not None for t in replies) > 0.75 * n


def test_fuzz_mutations():
    _fuzz(QUICK)


@pytest.mark.slow
def test_fuzz_mutations_full():
    _fuzz(FULL)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.text(max_size=60), json_values.map(json.dumps),
                          json_values.map(lambda v: "```json\n" + json.dumps(v) + "\n```")),
                min_size=20, max_size=40))
def test_fuzz_hypothesis_replies(replies):
    _check_batch(replies)
