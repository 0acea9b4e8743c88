"""The ``../shared/data`` side files: one path rule and one JSON-list loader with errors that name the file."""

import json

import pytest

from mnemis.data.locomo import default_locomo_path
from mnemis.data.shared import SHARED_DATA, load_json_list
from mnemis.eval.audit import default_audit_path, load_audit
from mnemis.eval.leniency import default_stress_path, load_stress


def test_every_default_path_is_in_shared_data():
    assert {default_locomo_path().name, default_audit_path().name, default_stress_path().name} == {
        "locomo10.json", "locomo_audit_errors.json", "locomo_judge_stress.json"}
    assert {default_locomo_path().parent, default_audit_path().parent, default_stress_path().parent} == {SHARED_DATA}


def test_load_json_list_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"judge stress file not found: .*nope\.json"):
        load_stress(tmp_path / "nope.json")
    bad = tmp_path / "audit.json"
    bad.write_text(json.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match=r"audit\.json: expected a list of LoCoMo audit entries"):
        load_audit(bad)
    good = tmp_path / "items.json"
    good.write_text(json.dumps([{"a": 1}, {"b": 2}]))
    assert load_json_list(good, "x") == [{"a": 1}, {"b": 2}]
