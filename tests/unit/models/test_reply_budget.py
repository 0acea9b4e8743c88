"""Reply budgets: every prompt's reply fits the max_tokens its stage runs with, in every shipped config."""

from __future__ import annotations

import importlib
import json
import pkgutil

import pytest

import mnemis.prompts
from mnemis.models.llm.base import LLMRequest, Sampling
from mnemis.models.llm.budget import (
    SLACK_TOKENS,
    fit_schema,
    plan,
    serialise,
    worst_case_tokens,
    worst_case_value,
)
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.prompts.base import Prompt
from mnemis.testing.budgets import PLAIN_TEXT_STAGES, stage_reply_schemas
from mnemis.prompts.extract_entities import ExtractedEntities
from mnemis.prompts.extract_facts import ExtractedFacts
from tests.helpers.compose import run_settings

_stages = stage_reply_schemas
PLAIN_TEXT = PLAIN_TEXT_STAGES


def _all_prompts() -> list[Prompt]:
    out = []
    for mod in pkgutil.iter_modules(mnemis.prompts.__path__):
        m = importlib.import_module(f"mnemis.prompts.{mod.name}")
        out += [v for v in vars(m).values() if isinstance(v, Prompt)]
    return out


CONFIGS = {
    "default": [],
    "quickstart": ["experiment=quickstart"],
    "paper": ["experiment=paper_locomo_k10"],
}


@pytest.fixture(scope="module")
def configs():
    return {name: run_settings(ov) for name, ov in CONFIGS.items()}


def test_every_prompt_with_a_schema_has_a_budgeted_stage(configs):
    stages = _stages(configs["default"])
    for p in _all_prompts():
        if p.schema is None:
            assert p.stage in PLAIN_TEXT, p.stage
        else:
            assert p.stage in stages, f"prompt {p.key} has no reply-budget check"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_effective_budget_covers_the_worst_case_reply(configs, name):
    cfg = configs[name]
    for stage, (schema, configured) in _stages(cfg).items():
        sampled = Sampling(max_tokens=configured).max_tokens
        effective, decode, note = plan(schema.model_json_schema(), sampled, cfg.reply_budget)
        worst = worst_case_tokens(decode)
        assert worst is not None, f"{name}/{stage}: unbounded reply schema"
        assert effective >= worst, f"{name}/{stage}: max_tokens {effective} < worst case {worst}"
        if name == "paper":
            assert note == "auto", (stage, configured)
        if name == "quickstart" and configured != "auto":  # fit: small budgets (hence run time) stay as configured
            assert effective == sampled and note in ("", "fitted"), (stage, note)


def test_worst_case_is_the_longest_valid_reply():
    schema = ExtractedFacts.model_json_schema()
    worst = worst_case_value(schema)
    assert len(worst["facts"]) == 8 and len(worst["facts"][0]["fact"]) == 300 and worst["facts"][0]["source"] == 99
    assert ExtractedFacts.model_validate(worst)
    assert worst_case_tokens(schema) == len(serialise(worst)) + SLACK_TOKENS
    # one item more or one character more makes it longer: the bound is tight in characters
    longer = json.loads(json.dumps(worst))
    longer["facts"][0]["fact"] += "x"
    assert len(serialise(longer)) > len(serialise(worst))


def test_fit_lowers_limits_until_the_worst_case_fits():
    schema = ExtractedEntities.model_json_schema()
    fitted = fit_schema(schema, 96)
    assert worst_case_tokens(fitted) <= 96 < worst_case_tokens(schema)
    names = fitted["properties"]["names"]
    assert 1 <= names["maxItems"] < 10 and 10 <= names["items"]["maxLength"] < 60
    assert fit_schema(schema, 10_000) is schema


def test_client_applies_the_policy():
    seen = []
    be = ScriptedBackend(lambda r: seen.append((r.sampling.max_tokens, r.json_schema())) or {"names": []})
    req = LLMRequest(messages=[{"role": "user", "content": "x"}], schema=ExtractedEntities,
                     sampling=Sampling(max_tokens=48), stage="extract_entities")
    worst = worst_case_tokens(ExtractedEntities.model_json_schema())
    LLM(be, reply_budget="raise").generate([req])
    LLM(be, reply_budget="fit").generate([req])
    LLM(be, reply_budget="off").generate([req])
    LLM(be).generate([req.model_copy(update={"sampling": Sampling(max_tokens="auto")})])
    (raised, s1), (fit, s2), (off, s3), (auto, _) = seen
    assert (raised, fit, off, auto) == (worst, 48, 48, worst)
    assert worst_case_tokens(s2) <= 48 and s1 == s3 == ExtractedEntities.model_json_schema()
    with pytest.raises(ValueError, match="unbounded|auto"):
        plan({"type": "object", "properties": {"x": {"type": "string"}}}, 0, "raise")
