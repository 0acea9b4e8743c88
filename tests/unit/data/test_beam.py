"""BEAM loader: the shared 100K files (counts), hand-made fixtures of the 100K and 10M layouts, bad input."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from mnemis.data.beam import ABILITIES, chat_ids, load_beam, split_marker
from mnemis.data.errors import DataError
from mnemis.data.load import load_dataset
from tests.helpers.compose import dataset_settings

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "beam"
SHARED_100K = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "beam" / "100K"


def test_shared_100k_counts(require_data):
    data = load_beam(require_data(SHARED_100K, "BEAM 100K"), scale="100K")
    assert len(data.groups) == 20 and data.groups[0] == "beam-100K-1" and data.groups[-1] == "beam-100K-20"
    assert len(data.episodes) == 5732 and len(data.questions) == 400
    assert data.summary()["questions_by_category"] == {a: 40 for a in ABILITIES}
    assert not any("->->" in e.content for e in data.episodes)  # every marker stripped
    assert {e.speaker for e in data.episodes} == {"user", "assistant"}
    assert data.warnings == {}  # every source_chat_id names a message
    q = next(q for q in data.questions if q.category == "event_ordering")
    assert q.meta["scorer"] == "beam_event_ordering" and q.meta["rubric"] and q.evidence
    assert sum(q.meta["scorer"] == "beam_rubric" for q in data.questions) == 360
    first = data.episodes_of("beam-100K-1")
    assert first[0].valid_at == datetime(2024, 3, 15) and first[0].name == "turn 1,1"
    assert first[60].valid_at == datetime(2024, 4, 5) and first[60].session == 2  # batch 2's anchor


def test_fixture_100k_episodes_dates_markers_and_evidence():
    data = load_beam(FIX / "100K", scale="100K")
    assert data.groups == ["beam-100K-1", "beam-100K-2"]
    eps = data.episodes_of("beam-100K-1")
    assert [e.source_id for e in eps] == [f"M{i}" for i in range(8)]
    assert eps[0].content == ("user: I'm starting a vegetable garden on my balcony this spring and the first "
                              "planting is due by April 10, 2024.")
    assert [e.name for e in eps[:4]] == ["turn 1,1", "turn 1,1", "turn 1,2", "message 3"]
    assert eps[6].name == "turn 2,2)" and eps[6].content.endswith("bullet points.")
    assert [e.session for e in eps] == [1, 1, 1, 1, 2, 2, 2, 2] and [e.turn for e in eps[4:]] == [0, 1, 2, 3]
    assert eps[3].valid_at == datetime(2024, 3, 15, 0, 1, 30) and eps[4].valid_at == datetime(2024, 4, 20)
    assert data.episodes_of("beam-100K-2")[0].valid_at == datetime(2024, 6, 1)  # the batch's own anchor
    qs = {q.category: q for q in data.questions_of("beam-100K-1")}
    assert set(qs) == set(ABILITIES)
    assert qs["contradiction_resolution"].evidence == ["beam-100K-1:M0", "beam-100K-1:M4"]  # dict of lists
    assert qs["multi_session_reasoning"].evidence == ["beam-100K-1:M0", "beam-100K-1:M4"]  # nested lists
    assert qs["abstention"].evidence == [] and qs["abstention"].abstention
    assert qs["knowledge_update"].answer == "$55" and qs["knowledge_update"].meta["reference_key"] == "answer"
    assert qs["summarization"].answer.startswith("You started") and qs["summarization"].meta["reference_key"] == \
        "ideal_summary"
    assert qs["instruction_following"].answer == "The response uses bullet points."
    assert qs["instruction_following"].meta["fields"]["instruction_being_tested"] == "Always answer in bullet points."
    assert qs["event_ordering"].meta["rubric"] == ["The plan", "The purchase", "The move"]
    assert qs["temporal_reasoning"].question_date == eps[-1].valid_at


def test_fixture_10m_plan_layout():
    data = load_beam(FIX / "10M", scale="10M")
    assert data.groups == ["beam-10M-1"] and len(data.episodes) == 12
    eps = data.episodes
    assert eps[8].source_id == "M8" and eps[8].session == 3 and eps[8].valid_at == datetime(2024, 6, 1)
    q = next(q for q in data.questions if q.category == "knowledge_update")
    assert q.evidence == ["beam-10M-1:M2", "beam-10M-1:M10"]  # questions one folder deeper, ids across plans


def test_markers_and_chat_ids():
    assert split_marker("text ->-> 3,8") == ("text", "3,8")
    assert split_marker("text\n\nmore ->->  3,8") == ("text\n\nmore", "3,8")
    assert split_marker("x ->-> 1,1)") == ("x", "1,1)") and split_marker("plain") == ("plain", None)
    assert chat_ids(None) == [] and chat_ids(5) == [5] and chat_ids({"a": [3, 1], "b": [[1], [7]]}) == [3, 1, 7]
    assert chat_ids("chat_id: 58") == [58]


def test_load_dataset_slices_beam_by_episodes():
    data = load_dataset(dataset_settings("beam", path=str(FIX / "100K"),
                                         slice={"groups": ["beam-100K-1"], "episodes": [1, 3]}))
    assert [e.source_id for e in data.episodes] == ["M0", "M1", "M2"]
    assert [q.category for q in data.questions] == ["information_extraction", "preference_following"]
    with pytest.raises(DataError, match="dataset.scale"):
        load_dataset(dataset_settings("beam", path=str(FIX / "100K"), scale="2M"))
    with pytest.raises(DataError, match="dataset.slice.episodes"):
        load_dataset(dataset_settings("beam", path=str(FIX / "100K"), slice={"episodes": [3, 1]}))


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "100K"
    shutil.copytree(FIX / "100K", root)
    return root


def _edit(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("file,mutate,where,problem", [
    ("chat.json", lambda d: d[0]["turns"][1][0].pop("content"), "chat.json: batch[0].turns[1][0].content",
     "missing field"),
    ("chat.json", lambda d: d[1]["turns"][0][1].__setitem__("role", "system"),
     "chat.json: batch[1].turns[0][1].role", "unknown role 'system' (expected user or assistant)"),
    ("chat.json", lambda d: d[1]["turns"][0][0].__setitem__("time_anchor", "someday"),
     "chat.json: batch[1].turns[0][0].time_anchor", "unparseable time_anchor"),
    ("chat.json", lambda d: d[0]["turns"][0][1].__setitem__("id", 0), "chat.json: batch[0].turns[0][1].id",
     "duplicate message id 0"),
    ("probing_questions.json", lambda d: d["summarization"][0].pop("rubric"),
     "probing_questions.json: summarization[0].rubric", "missing field"),
    ("probing_questions.json", lambda d: d["knowledge_update"][0].pop("answer"),
     "probing_questions.json: knowledge_update[0].answer", "missing field"),
    ("probing_questions.json", lambda d: d["abstention"][0].__setitem__("rubric", ["ok", 3]),
     "probing_questions.json: abstention[0].rubric", "expected a non-empty list of non-empty strings"),
    ("probing_questions.json", lambda d: d["abstention"][0].__setitem__("rubric", "one string"),
     "probing_questions.json: abstention[0].rubric", "expected list"),
    ("probing_questions.json", lambda d: d.__setitem__("humour", [{"question": "?", "rubric": ["x"]}]),
     "probing_questions.json: humour", "unknown question type"),
])
def test_bad_input_names_file_and_item(tmp_path, file, mutate, where, problem):
    root = _copy(tmp_path)
    _edit(root / "1" / file, mutate)
    with pytest.raises(DataError) as err:
        load_beam(root)
    assert where in str(err.value) and problem in str(err.value) and str(root / "1") in str(err.value)


def test_unknown_type_kept_unscored_when_asked(tmp_path):
    root = _copy(tmp_path)
    _edit(root / "1" / "probing_questions.json",
          lambda d: d.__setitem__("humour", [{"question": "Tell me a joke about my garden.", "rubric": ["funny"]}]))
    data = load_beam(root, unknown_types="keep")
    q = next(q for q in data.questions if q.category == "humour")
    assert q.meta["scorer"] is None and data.warnings["unscored_type"] == 1
    assert len(data.questions) == 21  # loaded, not dropped


def test_missing_folder_says_how_to_get_it(tmp_path):
    with pytest.raises(DataError, match="mnemis data fetch beam"):
        load_beam(tmp_path / "nope")


def test_located_files_are_checked_against_their_sums(tmp_path, monkeypatch):
    from mnemis.data import beam_files
    from mnemis.data.sources import DataDirs

    home = tmp_path / "home"
    shutil.copytree(FIX / "100K", home / "beam" / "1M")
    monkeypatch.setitem(beam_files.COUNTS, "1M", 2)
    dirs = DataDirs(home, (home,))
    one_m = dataset_settings("beam", scale="1M")
    assert load_dataset(one_m, data_dirs=dirs).warnings == {}  # no sums recorded yet
    (home / "beam" / "1M" / "SHA256SUMS").write_text("0" * 64 + "  1/chat.json\n")
    data = load_dataset(one_m, data_dirs=dirs)
    assert data.warnings == {"checksum_mismatch": 1} and data.groups == ["beam-1M-1", "beam-1M-2"]
