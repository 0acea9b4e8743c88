from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from mnemis.data.errors import DataError
from mnemis.data.longmemeval import load_longmemeval

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_mini.json"


def test_one_group_per_question():
    d = load_longmemeval(FIXTURE)
    assert d.groups == ["e47becba", "0a995998_abs", "gpt4_2f8be40d"]
    assert len(d.episodes) == 4 + 6 + 4 and len(d.questions) == 3
    q = d.questions[0]
    assert q.category == "single-session-user" and q.question_date == datetime(2023, 5, 30, 23, 40)
    assert q.evidence == ["e47becba:S2:1"]
    ep = d.episodes_of("e47becba")[2]
    assert ep.content.startswith("user: I graduated") and ep.valid_at == datetime(2023, 5, 20, 2, 57)
    assert d.episodes_of("e47becba")[3].valid_at == datetime(2023, 5, 20, 2, 57, 30)
    assert d.questions[1].abstention and not d.questions[0].abstention
    assert d.questions[2].evidence == ["gpt4_2f8be40d:S1:1", "gpt4_2f8be40d:S2:1"]
    # the same filler session in two haystacks gives the same text (the cache reuses its extraction)
    a = [e.content for e in d.episodes_of("e47becba") if e.session == 1]
    b = [e.content for e in d.episodes_of("0a995998_abs") if e.session == 2]
    assert a == b


def test_missing_file_says_where_to_get_it(tmp_path):
    with pytest.raises(DataError, match="xiaowu0162/longmemeval"):
        load_longmemeval(tmp_path / "longmemeval_s.json")


@pytest.mark.parametrize(
    "mutate,where",
    [
        (lambda d: d[0].pop("question_type"), "e47becba.question_type"),
        (lambda d: d[0]["haystack_dates"].__setitem__(1, "someday"), "e47becba.haystack_dates[1]"),
        (lambda d: d[0]["haystack_sessions"][1][0].pop("content"), "e47becba.haystack_sessions[1][0].content"),
        (lambda d: d[1]["haystack_dates"].pop(), "0a995998_abs: haystack_session_ids/dates/sessions lengths differ"),
        (lambda d: d[0]["haystack_sessions"][1][1].__setitem__("role", "system"),
         "lme.json:e47becba.haystack_sessions[1][1].role: unknown role 'system' (expected one of user, assistant)"),
    ],
)
def test_bad_input_names_the_item(tmp_path, mutate, where):
    data = json.loads(FIXTURE.read_text())
    mutate(data)
    p = tmp_path / "lme.json"
    p.write_text(json.dumps(data))
    with pytest.raises(DataError) as err:
        load_longmemeval(p)
    assert where in str(err.value)
