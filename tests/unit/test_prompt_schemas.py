"""Reply schemas that accept the bare JSON array a small model often sends instead of the wrapping object."""

import pytest
from pydantic import ValidationError

from mnemis.prompts.categorize import Categorization, bounded_categorization
from mnemis.prompts.select_nodes import NodeSelections


@pytest.mark.parametrize("schema", [Categorization, bounded_categorization(3)])
def test_categorization_bare_list(schema):
    wrapped = schema.model_validate({"assignments": [{"category": "Hobbies", "indexes": [1, 2]}]})
    bare = schema.model_validate([{"category": "Hobbies", "indexes": [1, 2]}])
    assert bare == wrapped and bare.assignments[0].indexes == [1, 2]
    assert schema.model_json_schema()["type"] == "object"  # constrained decoding still asks for the object
    with pytest.raises(ValidationError):
        schema.model_validate({"wrong": []})


def test_node_selections_bare_list():
    bare = NodeSelections.model_validate([{"id": "c1", "name": "Family"}])
    assert bare.selections[0].id == "c1" and bare == NodeSelections.model_validate({"selections": [{"id": "c1",
                                                                                                 "name": "Family"}]})
    with pytest.raises(ValidationError):
        NodeSelections.model_validate({})  # required: a truncated reply is not an empty selection
