from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from mnemis.data.errors import DataError
from mnemis.data.locomo import load_locomo, normalize_evidence
from mnemis.data.slicing import slice_dataset


def test_counts(locomo):
    s = locomo.summary()
    assert s["groups"] == 10 and s["sessions"] == 272 and s["episodes"] == 5882 and s["questions"] == 1986
    by_cat = s["questions_by_category"]
    assert (by_cat["multi-hop"], by_cat["temporal"], by_cat["open-domain"], by_cat["single-hop"]) == (282, 321, 96, 841)
    assert by_cat["adversarial"] == 446
    assert sum(1 for q in locomo.questions if q.category != "adversarial") == 1540
    per_group = [len(locomo.episodes_of(g)) for g in locomo.groups]
    assert per_group == [419, 369, 663, 629, 680, 675, 689, 681, 509, 568]
    assert locomo.warnings == {"evidence_unknown_id": 2}


@pytest.mark.parametrize(
    "group,source,name,when",
    [
        ("conv-26", "D1:1", "Text 1-0", datetime(2023, 5, 8, 13, 56, 0)),
        ("conv-26", "D6:6", "Text 6-5", datetime(2023, 7, 6, 20, 20, 30)),
        ("conv-49", "D14:1", "Text 14-0", datetime(2023, 10, 17, 13, 50, 0)),
        ("conv-49", "D5:4", "Text 5-3", datetime(2023, 8, 7, 19, 53, 30)),
    ],
)
def test_known_timestamps(locomo, group, source, name, when):
    ep = next(e for e in locomo.episodes_of(group) if e.source_id == source)
    assert ep.name == name and ep.valid_at == when and ep.id == f"{group}:{source}"
    assert ep.content.startswith(f"{ep.speaker}: ")


def test_image_caption_appended(locomo):
    captioned = [e for e in locomo.episodes if "(description of attached image: " in e.content]
    assert len(captioned) == 1226


@pytest.mark.parametrize(
    "raw,expected",
    [
        (["D8:6; D9:17"], [(8, 6), (9, 17)]),
        (["D9:1 D4:4 D4:6"], [(9, 1), (4, 4), (4, 6)]),
        (["D:11:26"], [(11, 26)]),
        (["D30:05"], [(30, 5)]),
        (["D1:18", "D", "D1:20"], [(1, 18), (1, 20)]),
        ([], []),
        (None, []),
    ],
)
def test_normalize_evidence(raw, expected):
    assert normalize_evidence(raw) == expected


def test_evidence_quirks_in_questions(locomo):
    q = {q.id: q for q in locomo.questions}
    assert q["conv-26:q37"].evidence == ["conv-26:D8:6", "conv-26:D9:17"]
    assert q["conv-50:q69"].evidence == ["conv-50:D30:5"]
    assert "conv-43:D11:26" in q["conv-43:q18"].evidence
    assert q["conv-42:q88"].evidence == ["conv-42:D1:18", "conv-42:D1:20"]
    assert q["conv-26:q30"].evidence == []
    assert "conv-42:D10:19" not in q["conv-42:q58"].evidence  # does not exist: dropped
    known = {e.id for e in locomo.episodes}
    assert all(ev in known for qq in locomo.questions for ev in qq.evidence)


def test_adversarial_uses_adversarial_answer(locomo_path, locomo):
    raw = json.loads(locomo_path.read_text())
    item = next(i for i in raw[0]["qa"] if i["category"] == 5)
    qi = raw[0]["qa"].index(item)
    q = next(q for q in locomo.questions if q.id == f"conv-26:q{qi}")
    assert q.category == "adversarial" and q.abstention and q.answer == str(item["adversarial_answer"])


def _write(tmp_path: Path, data) -> Path:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


def _mini(**over):
    conv = {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "hi"}, {"speaker": "Bob", "dia_id": "D1:2", "text": "yo"}],
    }
    conv.update(over)
    return [{"sample_id": "c1", "conversation": conv, "qa": [{"question": "q?", "answer": "a", "evidence": ["D1:2"], "category": 4}]}]


def test_mini_file_loads(tmp_path):
    d = load_locomo(_write(tmp_path, _mini()), verify_checksum=False)
    assert [e.id for e in d.episodes] == ["c1:D1:1", "c1:D1:2"] and d.questions[0].evidence == ["c1:D1:2"]
    # ids come from dia_id (leading zeros and spaces normalised), not from the turn's position
    d = load_locomo(_write(tmp_path, _mini(session_1=[{"speaker": "Ann", "dia_id": " D1:03", "text": "hi"}])),
                    verify_checksum=False)
    assert [e.id for e in d.episodes] == ["c1:D1:3"]


@pytest.mark.parametrize(
    "data,where",
    [
        ("{not json", "bad.json"),
        (_mini(session_1_date_time="yesterday"), "c1 session_1_date_time"),
        (_mini(session_1=[{"speaker": "Ann", "dia_id": "D1:1"}]), "c1 session_1[0].text"),
        (_mini(session_1=[{"speaker": "Ann", "dia_id": "D1:1", "text": 5}]), "c1 session_1[0].text"),
        (_mini(session_1=[{"speaker": "Zed", "dia_id": "D1:1", "text": "x"}]), "c1 session_1[0].speaker"),
        ({"not": "a list"}, "bad.json"),
        # two turns with one dia_id: the second would overwrite the first (one episode id for two turns)
        (_mini(session_1=[{"speaker": "Ann", "dia_id": "D1:1", "text": "hi"},
                          {"speaker": "Bob", "dia_id": "D1:1", "text": "yo"}]),
         "bad.json:c1 session_1[1].dia_id: duplicate dia_id 'D1:1' (already used by bad.json:c1 session_1[0])"),
        (_mini(session_1=[{"speaker": "Ann", "dia_id": "1-1", "text": "hi"}]),
         "bad.json:c1 session_1[0].dia_id: malformed dia_id '1-1'"),
        (_mini(session_1=[{"speaker": "Ann", "dia_id": "D1:1:2", "text": "hi"}]), "malformed dia_id 'D1:1:2'"),
        (_mini(session_1=[{"speaker": "Ann", "dia_id": "D2:1", "text": "hi"}]),
         "bad.json:c1 session_1[0].dia_id: dia_id 'D2:1' names session 2, not 1"),
    ],
)
def test_bad_input_names_the_item(tmp_path, data, where):
    with pytest.raises(DataError) as err:
        load_locomo(_write(tmp_path, data), verify_checksum=False)
    assert where in str(err.value)


def test_missing_file_is_clear(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_locomo(tmp_path / "nope.json")


def test_checksum_mismatch_warns(tmp_path):
    d = load_locomo(_write(tmp_path, _mini()))
    assert d.warnings.get("checksum_mismatch") == 1


def test_slicing(locomo):
    s = slice_dataset(locomo, groups=["conv-26"], sessions=(1, 2))
    assert s.groups == ["conv-26"] and {e.session for e in s.episodes} == {1, 2}
    assert [e.position for e in s.episodes] == list(range(len(s.episodes)))
    kept = {e.id for e in s.episodes}
    assert s.questions and all(q.evidence and set(q.evidence) <= kept for q in s.questions)
    s2 = slice_dataset(locomo, max_groups=2, max_questions=3)
    assert s2.groups == ["conv-26", "conv-30"] and len(s2.questions) == 6
    with pytest.raises(DataError, match="unknown group"):
        slice_dataset(locomo, groups=["conv-999"])


def test_load_dataset_slices_locomo_by_turns(locomo_path):
    """``dataset.slice.episodes`` keeps the first turns of each conversation (the benches' short slices use it), and
    the questions whose evidence lies in the kept turns only."""
    from mnemis.data.load import load_dataset
    from tests.helpers.compose import dataset_settings, plain_config

    data = load_dataset(dataset_settings("locomo", path=str(locomo_path),
                                         slice={"groups": ["conv-26"], "sessions": [1, 1], "episodes": [1, 6]}))
    assert [e.source_id for e in data.episodes] == [f"D1:{i}" for i in range(1, 7)]
    assert data.questions and all(q.group_id == "conv-26" for q in data.questions)
    with pytest.raises(DataError, match="dataset.slice.episodes"):
        load_dataset(dataset_settings("locomo", path=str(locomo_path), slice={"episodes": [6, 1]}))
    # the key composes from the command line as the benches pass it (no '+': the YAML holds it)
    cfg = plain_config(["experiment=cpu_small", "dataset.slice.sessions=[1,1]", "dataset.slice.episodes=[1,6]"])
    assert cfg["dataset"]["slice"]["episodes"] == [1, 6]
    from mnemis.settings import load_settings

    assert load_settings(cfg).dataset.slice.episodes == [1, 6]
