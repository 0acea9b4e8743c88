"""The categorize and describe_category prompts: rendering and schema round trips."""

from __future__ import annotations

import json

import pytest

from mnemis.models.llm.client import parse_reply
from mnemis.prompts.categorize import CATEGORIZE, Assignment, Categorization, NodeView, bounded_categorization
from mnemis.prompts.describe_category import DESCRIBE_CATEGORY, CategoryDescription, ChildView


def test_categorize_renders_indexed_nodes_existing_and_guidance():
    msgs = CATEGORIZE.render(
        [NodeView("Dog", ["pet", "animal"]), NodeView("Oak", [])],
        1,
        existing=[
            NodeView("Speaker", ()),
            NodeView("Pets", ["animals"]),
            NodeView("Trees", ["plant"], ["Oak", "Elm"]),
        ],
        min_children=3,
        speaker="Speaker",
    )
    assert [m["role"] for m in msgs] == ["system", "user"]
    sys, usr = msgs[0]["content"], msgs[1]["content"]
    assert "at least 3 nodes" in sys and '"and" or "&"' in sys and '{"assignments": [{"category"' in sys
    assert "Nodes:\n1. Dog [pet, animal]\n2. Oak []\n\n" in usr
    # an existing category may be described by its tags and some members
    assert "- Speaker\n- Pets [animals]\n- Trees [plant]: e.g. Oak, Elm\n" in usr
    assert 'go into the existing category "Speaker"' in usr and "Layer 1:" in usr
    assert "from 1 to 2 must appear" in usr and "left without a category" not in usr
    assert CATEGORIZE.key == "categorize@v2" and CATEGORIZE.stage == "categorize"


def test_categorize_higher_layer_and_reask():
    usr = CATEGORIZE.render([NodeView("Pets", ["animals"])], 3, reask=True)[1]["content"]
    assert usr.startswith("These nodes were left without a category.")
    assert "Layer 3: the nodes are the categories of layer 2." in usr
    assert "Existing categories" not in usr and "Speaker" not in usr


def test_render_is_deterministic():
    args = ([NodeView("a", ["t"])], 2)
    assert CATEGORIZE.fingerprint(*args) == CATEGORIZE.fingerprint(*args)
    assert CATEGORIZE.fingerprint(*args) != CATEGORIZE.fingerprint([NodeView("b", ["t"])], 2)


@pytest.mark.parametrize(
    "text",
    [
        '{"assignments": [{"category": "Pets", "indexes": [1, 2]}]}',
        '[{"category": "Pets", "indexes": [1, 2]}]',
        '```json\n{"assignments": [{"category": "Pets", "indexes": ["1", 2]}]}\n```',
    ],
)
def test_categorization_schema_accepts_common_shapes(text):
    parsed, err = parse_reply(text, Categorization)
    assert err is None and parsed == Categorization(assignments=[Assignment(category="Pets", indexes=[1, 2])])


def test_schemas_round_trip_and_are_objects():
    for schema, value in [
        (Categorization, Categorization(assignments=[Assignment(category="A", indexes=[1])])),
        (CategoryDescription, CategoryDescription(tags=["x"], summary="s")),
    ]:
        js = schema.model_json_schema()
        assert js["type"] == "object" and json.dumps(js)
        assert schema.model_validate_json(value.model_dump_json()) == value
    assert parse_reply('{"assignments": "nope"}', Categorization)[1] is not None


def test_describe_renders_children_and_truncates():
    kids = [ChildView("Dog", ["pet"], "A very " + "long " * 100 + "summary."), ChildView("Cat", (), "")]
    msgs = DESCRIBE_CATEGORY.render("Pets", 1, kids, omitted=4, max_summary_chars=50)
    usr = msgs[1]["content"]
    assert usr.startswith('Category: "Pets" (layer 1 of the hierarchy)\nMembers:\n- Dog [pet]: A very long')
    assert "...\n- Cat\n(and 4 more members)" in usr
    assert max(len(line) for line in usr.splitlines()) < 80
    assert "at most 3 words" in msgs[0]["content"] and DESCRIBE_CATEGORY.key == "describe_category@v1"


def test_bounded_schema_tightens_decoding_but_not_validation():
    bounded = bounded_categorization(4)
    assert bounded is bounded_categorization(4) and issubclass(bounded, Categorization)
    js = bounded.model_json_schema()
    idx = js["$defs"]["Assignment"]["properties"]["indexes"]
    assert idx["maxItems"] == 4 and idx["items"] == {"type": "integer", "minimum": 1, "maximum": 4}
    assert js["properties"]["assignments"]["maxItems"] == 4
    assert "maximum" not in json.dumps(Categorization.model_json_schema())  # the base schema is untouched
    parsed, err = parse_reply('[{"category": "A", "indexes": [1, 9]}]', bounded)
    assert err is None and parsed.assignments[0].indexes == [1, 9]  # repaired later, not rejected here
    assert "minItems" not in json.dumps(js)  # no decoding minimum unless asked (mode=paper)


def test_decoding_minimum_of_categories_is_bounded_by_the_nodes():
    js = bounded_categorization(4, 1, 2).model_json_schema()
    assert js["properties"]["assignments"]["minItems"] == 1
    assert js["$defs"]["Assignment"]["properties"]["indexes"]["minItems"] == 2
    tiny = bounded_categorization(1, 3, 2).model_json_schema()  # never more than the nodes listed
    assert tiny["properties"]["assignments"]["minItems"] == 1
    assert tiny["$defs"]["Assignment"]["properties"]["indexes"]["minItems"] == 1
    assert bounded_categorization(4, 1, 2).__name__ != bounded_categorization(4).__name__
    parsed, err = parse_reply('{"assignments": []}', bounded_categorization(4, 1, 2))
    assert err is None and parsed.assignments == []  # validation stays lax: an unconstrained backend's reply is kept
