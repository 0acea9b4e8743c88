"""LoCoMo-Plus stitching: time gaps, speakers, the cue session's place, the seeded draw, the shared file."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from mnemis.data.errors import DataError
from mnemis.data.load import load_dataset
from mnemis.data.locomo_plus import assign_conversations, dialogue_lines, gap_days, load_locomo_plus
from tests.helpers.compose import dataset_settings

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "locomo_plus"
LOCOMO, PLUS = FIX / "locomo_mini.json", FIX / "locomo_plus_mini.json"
SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"


@pytest.mark.parametrize("gap,days", [
    ("two weeks later", 14), ("about six weeks later", 42), ("one month later", 30), ("a month later", 30),
    ("three months later", 90), ("a year after", 365), ("about one year later", 365), ("8 weeks later", 56),
    ("several months later", 0), ("three days later", 0),
])
def test_gap_days(gap, days):
    assert gap_days(gap) == days


def test_dialogue_lines_map_speakers():
    assert dialogue_lines("A: hi\nnoise\n B: yo \nA:bye", "Nora", "Ivan") == [
        ("Nora", "hi"), ("Ivan", "yo"), ("Nora", "bye")]


def test_stitched_groups_by_hand():
    d = load_locomo_plus(PLUS, locomo_path=LOCOMO, assign="cycle")
    assert d.groups == ["conv-a", "conv-b", "plus-0", "plus-1", "plus-2"]
    assert d.summary()["questions_by_category"] == {"adversarial": 1, "cognitive": 3, "single-hop": 2}
    # entry 0 -> conv-a: asked 7 days after its last session (1 June 9:15); the cue 14 days before that
    eps = d.episodes_of("plus-0")
    cue = [e for e in eps if e.source_id.startswith("CUE:")]
    assert [(e.speaker, e.content) for e in cue] == [
        ("Nora", "Nora: After the flat tyre I decided to walk to work."), ("Ivan", "Ivan: Walking is good for you.")]
    assert cue[0].valid_at == datetime(2023, 5, 25, 9, 15) and cue[0].session == 3
    assert [e.source_id for e in eps] == ["D1:1", "D1:2", "D2:1", "D2:2", "CUE:1", "CUE:2", "D3:1", "D3:2"]
    assert [e.session for e in eps] == [1, 1, 2, 2, 3, 3, 4, 4] and [e.position for e in eps] == list(range(8))
    q = d.questions_of("plus-0")[0]
    assert q.category == "cognitive" and q.question_date == datetime(2023, 6, 8, 9, 15)
    assert q.question == ('Nora says: "My legs are so sore lately." Write Ivan\'s reply to this message, drawing on '
                          "anything relevant from their past conversations.")
    assert q.evidence == ["plus-0:CUE:1", "plus-0:CUE:2"] and q.answer == q.meta["cue"]
    assert {k: q.meta[k] for k in ("relation_type", "time_gap", "locomo_group", "cue_session", "scorer")} == {
        "relation_type": "causal", "time_gap": "two weeks later", "locomo_group": "conv-a", "cue_session": 3,
        "scorer": "locomo_plus_cognitive"}
    assert "causal" not in q.question  # the relation type is a gold label: never in the question text
    # entry 1 -> conv-b: "several months" names no number: 0 days, the cue just before the question
    eps1 = d.episodes_of("plus-1")
    assert eps1[-1].source_id == "CUE:1" and eps1[-1].valid_at == datetime(2024, 1, 27, 7, 44, 30)
    # entry 2 -> conv-a again: a year back puts the cue before every session
    eps2 = d.episodes_of("plus-2")
    assert eps2[0].source_id == "CUE:1" and eps2[0].valid_at == datetime(2022, 6, 8, 9, 15) and eps2[0].session == 1


def test_seeded_draw_is_reproducible_and_part_of_the_config():
    groups = [f"conv-{i}" for i in range(10)]
    a = assign_conversations(50, groups, seed=3)
    assert a == assign_conversations(50, groups, seed=3) and set(a) <= set(groups)
    assert len({tuple(assign_conversations(50, groups, seed=s)) for s in range(5)}) == 5
    assert assign_conversations(3, groups, assign="cycle") == ["conv-0", "conv-1", "conv-2"]
    with pytest.raises(DataError, match="dataset.assign"):
        assign_conversations(3, groups, assign="shuffle")
    d0 = load_dataset(dataset_settings("locomo_plus", path=str(PLUS), locomo_path=str(LOCOMO), seed=0,
                                       include_locomo=False))
    assert d0.groups == ["plus-0", "plus-1", "plus-2"]
    draws = {tuple(q.meta["locomo_group"] for q in load_locomo_plus(PLUS, locomo_path=LOCOMO, seed=s).questions
                   if q.category == "cognitive") for s in range(6)}
    assert len(draws) > 1  # the seed changes which conversation each entry lands in


@pytest.mark.parametrize("mutate,where", [
    (lambda d: d[1].pop("time_gap"), "locomo_plus_mini.json[1].time_gap"),
    (lambda d: d[0].__setitem__("cue_dialogue", "no speaker here"), "locomo_plus_mini.json[0].cue_dialogue"),
    (lambda d: d[2].__setitem__("trigger_query", "A: one\nB: two"), "locomo_plus_mini.json[2].trigger_query"),
])
def test_bad_entries_name_the_item(tmp_path, mutate, where):
    data = json.loads(PLUS.read_text())
    mutate(data)
    p = tmp_path / "locomo_plus_mini.json"
    p.write_text(json.dumps(data))
    with pytest.raises(DataError, match=where.replace("[", r"\[").replace("]", r"\]")):
        load_locomo_plus(p, locomo_path=LOCOMO)


def test_shared_file(require_data):
    plus = require_data(SHARED / "locomo_plus.json", "LoCoMo-Plus")
    d = load_locomo_plus(plus, locomo_path=require_data(SHARED / "locomo10.json", "LoCoMo"))
    cog = [q for q in d.questions if q.category == "cognitive"]
    assert len(d.groups) == 411 and len(cog) == 401 and len(d.questions) == 1986 + 401
    assert {q.meta["relation_type"] for q in cog} == {"causal", "state", "goal", "value"}
    ids = {e.id for e in d.episodes}
    assert all(q.evidence and set(q.evidence) <= ids for q in cog)
    last = {e.group_id: e.valid_at for e in d.episodes}  # episodes are in order: the last one per group wins
    assert all(q.question_date > last[q.group_id] for q in cog)
