"""The selection prompt in the released form (mode=paper): one user message, the query before the nodes, one
JSON line per node with its store id, name and tags in store order, get_all_children; ours stays as it was."""

from __future__ import annotations

import pytest

from mnemis.config import compose, to_plain
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.retrieve.system2 import System2
from mnemis.types import Question
from tests.helpers.system2 import build_store, cid, eid, prompt_candidates, selector

MUSIC = "Which instrument does Caroline play?"


@pytest.fixture
def store(tmp_path):
    s = build_store(tmp_path / "m.db")
    yield s
    s.close()


def _run(store, form, plan):
    backend = ScriptedBackend(selector(plan))
    q = Question(group_id="g1", id="q0", question=MUSIC, answer="", category="1")
    [res] = System2(store, LLM(backend, max_retries=0), prompt_form=form, entity_round=False).select([q])
    return res, backend


def test_released_form_puts_the_query_first_in_one_user_message_with_store_ids(store):
    res, backend = _run(store, "released", {MUSIC: {"Lifestyle": True}})
    (req,) = backend.batches[0]
    assert [m["role"] for m in req.messages] == ["user"]
    text = req.messages[0]["content"]
    assert text.index("User query:") < text.index(MUSIC) < text.index("Available nodes:")
    cands = prompt_candidates(req)
    assert [c["name"] for c in cands] == ["Lifestyle", "People"]  # store order (as built), not alphabetical
    assert [c["uuid"] for c in cands] == [cid("g1", 2, "Lifestyle"), cid("g1", 2, "People")]
    assert all(set(c) >= {"uuid", "name", "tag"} for c in cands)
    schema = req.json_schema()
    item = schema["$defs"]["ReleasedSelection"]
    assert item["properties"]["uuid"]["enum"] == [c["uuid"] for c in cands]
    assert set(item["required"]) == {"name", "uuid", "get_all_children"}
    assert "get_all_children" in text and "take_all_children" not in text
    # the get_all_children shortcut brings the subtree as in our form
    assert res.traversal.rounds[0].flagged == [cid("g1", 2, "Lifestyle")]
    assert eid("g1", "guitar") in {h.id for h in res.context.entities}


def test_released_form_children_keep_store_order(store):
    res, backend = _run(store, "released", {MUSIC: {"People": False, "Lifestyle": False, "Hobbies": True}})
    second = backend.batches[1][0]
    # children of the picked top nodes in the order the store holds their edges, not sorted by name
    assert [c["name"] for c in prompt_candidates(second)] == ["Health", "Hobbies", "Speaker", "Family"]
    assert cid("g1", 1, "Hobbies") in res.traversal.rounds[1].flagged


def test_our_form_is_unchanged(store):
    _, backend = _run(store, "ours", {MUSIC: {"Lifestyle": True}})
    (req,) = backend.batches[0]
    assert [m["role"] for m in req.messages] == ["system", "user"]
    text = req.messages[1]["content"]
    assert text.index("Available nodes:") < text.index("Query:")
    assert [c["id"] for c in prompt_candidates(req)] == ["n1", "n2"]


def test_paper_mode_selects_the_released_form():
    assert to_plain(compose(["experiment=paper_locomo_k10"]))["retrieval"]["system2"]["prompt_form"] == "released"
    assert to_plain(compose(["experiment=quickstart"]))["retrieval"]["system2"]["prompt_form"] == "ours"
