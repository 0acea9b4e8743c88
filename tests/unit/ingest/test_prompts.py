"""Base-graph prompts: schemas, shared prefixes, and the value cleaners used on replies."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from mnemis.ingest.common import clean_name, parse_when, relation_name
from mnemis.models.llm.client import parse_reply
from mnemis.models.llm.scripted import minimal_instance
from mnemis.prompts.dedup_facts import DEDUP_FACTS
from mnemis.prompts.entity_attributes import ENTITY_ATTRIBUTES, clean_tags
from mnemis.prompts.extract_entities import EXTRACT_ENTITIES, REFLECT_ENTITIES
from mnemis.prompts.extract_facts import EXTRACT_FACTS, REFLECT_FACTS
from mnemis.prompts.resolve_entities import RESOLVE_ENTITIES
from tests.helpers.ingest import episodes

PROMPTS = [EXTRACT_ENTITIES, REFLECT_ENTITIES, EXTRACT_FACTS, REFLECT_FACTS, RESOLVE_ENTITIES, DEDUP_FACTS,
           ENTITY_ATTRIBUTES]


@pytest.mark.parametrize("prompt", PROMPTS, ids=lambda p: p.key)
def test_schema_round_trip(prompt):
    schema = prompt.schema.model_json_schema()
    json.dumps(schema)
    value = minimal_instance(schema)
    parsed, err = parse_reply(json.dumps(value), prompt.schema)
    assert err is None and parsed is not None
    assert prompt.version == ("v3" if prompt in (EXTRACT_FACTS, REFLECT_FACTS) else "v1")


def test_extraction_prompts_share_their_prefix():
    eps = episodes("g", [("Melanie", "one"), ("Caroline", "two"), ("Melanie", "I painted a Sunset")])
    cur, prev = eps[2], eps[:2]
    renders = [EXTRACT_ENTITIES.render(cur, prev), REFLECT_ENTITIES.render(cur, prev, ["Melanie"]),
               EXTRACT_FACTS.render(cur, prev, ["Melanie", "Sunset"]),
               REFLECT_FACTS.render(cur, prev, ["Melanie", "Sunset"], ["Melanie painted a sunset."])]
    systems = {r[0]["content"] for r in renders}
    assert len(systems) == 1
    head = renders[0][1]["content"].rsplit("\n", 1)[0]
    assert all(r[1]["content"].startswith(head) for r in renders)
    assert "Melanie: I painted a Sunset" in head and "2023-05-08 13:58" in head
    # context is shown once, never repeated
    assert sum(r[1]["content"].count("Caroline: two") for r in renders) == len(renders)


def test_system_prompt_identical_across_items():
    eps = episodes("g", [("A", "x"), ("B", "y")])
    a, b = EXTRACT_ENTITIES.render(eps[0], []), EXTRACT_ENTITIES.render(eps[1], eps[:1])
    assert a[0] == b[0] and a[1] != b[1]


def test_resolve_and_dedup_render_indices():
    msgs = RESOLVE_ENTITIES.render("Caroline: Mel!", ["Mel"], [("Melanie", "A painter."), ("Paris", "")])
    text = msgs[-1]["content"]
    assert "0. Melanie - A painter." in text and "1. Paris\n" in text and "New names:\n0. Mel" in text
    text = DEDUP_FACTS.render("2023-05-08", ["A likes B."], ["A likes B. (2023-01-01 - now)"])[-1]["content"]
    assert "Existing facts:\n0. A likes B. (2023-01-01 - now)" in text
    assert "New facts (stated 2023-05-08):\n0. A likes B." in text


@pytest.mark.parametrize("raw,expected,ok", [
    ("2023-05-08", datetime(2023, 5, 8), True),
    ("2023-05-08T10:30:00Z", datetime(2023, 5, 8, 10, 30), True),
    ("2023-05-08T12:30:00+02:00", datetime(2023, 5, 8, 10, 30), True),
    ("2023-05", datetime(2023, 5, 1), True),
    ("2023", datetime(2023, 1, 1), True),
    ("", None, True), ("unknown", None, True), (None, None, True),
    ("last Tuesday", None, False), ("31/31/2023", None, False), ("0001-01-01", None, False), (5, None, False),
])
def test_parse_when(raw, expected, ok):
    assert parse_when(raw) == (expected, ok)


def test_cleaners():
    assert relation_name("works at") == "WORKS_AT" and relation_name(" has-a dog ") == "HAS_A_DOG"
    assert relation_name("!!!") is None and relation_name(3) is None
    assert clean_name("  Mel  anie ") == "Mel anie"
    assert clean_name("   ") is None and clean_name("...") is None
    assert clean_name("x" * 81) is None and clean_name(None) is None
    tags = clean_tags(["Pet dog", "pet DOG", "", "a b c d", "x", "y", "z", "w"])
    assert tags == ["Pet dog", "a b c", "x", "y", "z"]


def test_default_config_matches_builder_signature():
    import inspect

    import yaml

    from mnemis.ingest.graphiti.builder import GraphitiGraphBuilder
    from mnemis.ingest.pipeline import BaseGraphBuilder

    cfg = yaml.safe_load((Path(__file__).parents[3] / "conf" / "ingest" / "default.yaml").read_text())
    assert cfg.pop("_target_") == "mnemis.ingest.builders.make_builder" and cfg.pop("_partial_") is True
    assert cfg.pop("builder") == "mnemis"
    inspect.signature(GraphitiGraphBuilder).bind(store=None, llm=None, embedder=None, **cfg.pop("graphiti"))
    inspect.signature(BaseGraphBuilder).bind(store=None, llm=None, embedder=None, **cfg)


def test_round_robin_gives_every_list_its_best_candidates():
    from mnemis.ingest.common import round_robin

    assert round_robin([["a", "b", "c"], ["x", "a", "y"]], 4) == ["a", "x", "b", "c"]
    assert round_robin([["a"], [], ["b", "c"]], 10) == ["a", "b", "c"]
    assert round_robin([], 3) == []
