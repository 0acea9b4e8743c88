"""The ``../shared/data`` side files: one path rule and one JSON-list loader with errors that name the file."""

import json

import pytest

from mnemis.data.locomo import default_locomo_path
from mnemis.data.shared import SHARED_DATA, load_json_list
from mnemis.data.sources import DataDirs
from mnemis.eval.audit import default_audit_path, load_audit
from mnemis.eval.leniency import default_stress_path, load_stress


def test_every_default_path_is_in_the_data_dirs():
    assert {default_locomo_path().name, default_audit_path().name, default_stress_path().name} == {
        "locomo10.json", "locomo_audit_errors.json", "locomo_judge_stress.json"}
    dirs = DataDirs.from_config()
    assert SHARED_DATA in dirs.search  # ../shared/data beside the checkout is always looked in
    assert {default_locomo_path().parent, default_audit_path().parent, default_stress_path().parent} <= set(dirs.search)


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
