"""LongMemEval-M: the streamed JSON array reader (items, errors, bounded memory) and the selecting loader."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from mnemis.data.errors import DataError
from mnemis.data.json_stream import iter_json_array
from mnemis.data.load import load_dataset
from mnemis.data.longmemeval import load_longmemeval
from mnemis.data.longmemeval_m import load_longmemeval_m
from mnemis.data.shard import restrict_dataset
from tests.helpers.compose import dataset_settings

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_mini.json"


@pytest.mark.parametrize("block", [1, 3, 7, 64, 1 << 20])
def test_items_in_order_whatever_the_block(tmp_path, block):
    items = [{"a": "x]y,z\"", "n": [1, 2, {"b": None}]}, 12345, "str ] ,", [], {}, 3.5e-3, True, None, -7]
    p = tmp_path / "a.json"
    p.write_text(" \n[ " + " ,\n".join(json.dumps(i) for i in items) + " ]\n ")
    assert list(iter_json_array(p, block=block)) == items
    p.write_text("[]")
    assert list(iter_json_array(p, block=block)) == []


@pytest.mark.parametrize("text,where,problem", [
    ('{"a": 1}', "x.json", "top level must be a JSON array"),
    ('[{"a": 1}, {"b": ', "item 1", "malformed JSON"),
    ('[{"a": 1} {"b": 2}]', "item 1", "expected ',' or ']'"),
    ('[1, 2] tail', "x.json", "text after the end"),
    ('[1, 2', "item 2", "file ends inside the top-level array"),
    ('[1, 2,', "item 2", "file ends after ','"),
])
def test_errors_name_the_file_and_item(tmp_path, text, where, problem):
    p = tmp_path / "x.json"
    p.write_text(text)
    with pytest.raises(DataError) as err:
        list(iter_json_array(p, block=4))
    assert where in str(err.value) and problem in str(err.value)


def test_an_item_over_the_limit_is_an_error(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps([{"t": "a" * 5000}]))
    with pytest.raises(DataError, match="item 0: item larger than 1,000 characters"):
        list(iter_json_array(p, block=64, max_item_chars=1000))


def test_memory_stays_bounded_on_a_multi_mb_file(tmp_path):
    p = tmp_path / "big.json"
    item = {"question_id": "q", "turns": [{"role": "user", "content": "word " * 4000}] * 5}  # ~100 KB each
    with open(p, "w") as f:
        f.write("[")
        for i in range(60):
            f.write(("," if i else "") + json.dumps({**item, "question_id": f"q{i}"}))
        f.write("]")
    size = p.stat().st_size
    assert size > 5_000_000
    tracemalloc.start()
    n = sum(1 for _ in iter_json_array(p, block=64 << 10))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == 60 and peak < size / 6, (peak, size)  # about one item plus one block, not the file


def test_streamed_loader_matches_the_s_loader_and_selects(tmp_path):
    full = load_longmemeval(FIXTURE)
    m = load_longmemeval_m(FIXTURE)
    assert m.name == "longmemeval_m" and m.groups == full.groups
    assert m.episodes == full.episodes and m.questions == full.questions
    assert load_longmemeval_m(FIXTURE, max_groups=1).groups == ["e47becba"]
    assert load_longmemeval_m(FIXTURE, groups=["gpt4_2f8be40d"]).groups == ["gpt4_2f8be40d"]
    for spec in ("0/2", "1/2"):  # the shard rule of mnemis.data.shard, applied while streaming
        assert load_longmemeval_m(FIXTURE, shard=spec).groups == restrict_dataset(full, spec).groups
    via = load_dataset(dataset_settings("longmemeval_m", path=str(FIXTURE), slice={"max_groups": 2}), shard="1/2")
    assert via.groups == ["e47becba"]  # sorted ids 0a99..., e47b...: shard 1 of 2 is the second
    with pytest.raises(DataError, match="unknown group ids"):
        load_longmemeval_m(FIXTURE, groups=["nope"])
    with pytest.raises(DataError, match="not found"):
        load_longmemeval_m(tmp_path / "missing.json")


def test_bad_instance_names_the_item(tmp_path):
    data = json.loads(FIXTURE.read_text())
    data[1]["haystack_sessions"][0][0]["role"] = "system"
    p = tmp_path / "m.json"
    p.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"m\.json:0a995998_abs\.haystack_sessions\[0\]\[0\]\.role"):
        load_longmemeval_m(p)
