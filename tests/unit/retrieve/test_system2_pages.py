"""System-2 over a layer wider than one prompt allows: window-sized pages selected in one batch and merged, pages
the engine still rejects halved and asked again, and every remaining fallback named (``prompt_too_long`` when the
window was the cause)."""

from __future__ import annotations

import pytest

from mnemis.eval.run_health import system2_health
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.retrieve.pages import is_window_error, messages_tokens, split_pages
from mnemis.retrieve.system2 import System2
from mnemis.store.sqlite import GraphStore
from mnemis.types import Category, CategoryEdge, Entity, Question, category_id, entity_id
from tests.helpers.system2 import prompt_candidates, selector

WIDE = 150
QUESTION = "Which topics did they discuss?"
WANTED = {"Topic 7": False, "Topic 140": False}


@pytest.fixture
def store(tmp_path):
    s = GraphStore(tmp_path / "flat.db")
    ents = [Entity(group_id="g", id=entity_id("g", f"thing {i}"), name=f"thing {i}", tags=["thing"])
            for i in range(WIDE)]
    s.upsert_entities(ents)
    cats = [Category(group_id="g", id=category_id("g", 1, f"Topic {i}"), name=f"Topic {i}", layer=1,
                     tags=["a topic tag", "another tag"], promoted=True) for i in range(WIDE)]
    edges = [CategoryEdge(group_id="g", parent_id=c.id, child_id=e.id) for c, e in zip(cats, ents)]
    s.replace_hierarchy("g", cats, edges)
    yield s
    s.close()


def windowed(limit_tokens: int, inner=None):
    """A backend that rejects a prompt longer than ``limit_tokens`` (estimated) the way vLLM does."""
    inner = inner or selector({QUESTION: WANTED})

    def respond(req):
        if messages_tokens(req.messages) > limit_tokens:
            raise ValueError("This model's maximum context length is 1024 tokens. However, your prompt contains "
                             "at least 1025 input tokens")
        return inner(req)

    return respond


def select(store, respond, **cfg):
    backend = ScriptedBackend(respond)
    cfg = {"max_candidates_per_prompt": None, "entity_round": False, "max_tokens": 128, **cfg}
    [res] = System2(store, LLM(backend, max_retries=0), **cfg).select([Question(group_id="g", id="q", question=QUESTION,
                                                                                  answer="", category="1")])
    return res, backend


@pytest.mark.parametrize("form", ["ours", "released"])
def test_a_wide_layer_is_paged_to_the_window_in_one_batch(store, form):
    res, backend = select(store, windowed(2048), page_by_window=True, window_tokens=2048, prompt_form=form)
    first = backend.batches[0]
    assert len(first) > 1 and all(messages_tokens(r.messages) + 128 <= 2048 for r in first)
    shown = [c["name"] for r in first for c in prompt_candidates(r)]
    assert sorted(shown) == sorted(f"Topic {i}" for i in range(WIDE))  # every candidate on exactly one page
    assert res.traversal.fallback is None and res.traversal.rounds[0].prompts == len(first)
    picked = {h.id for h in res.context.entities if h.scores.get("s2") == 1.0}
    assert picked == {category_id("g", 1, n) for n in WANTED}  # picks from different pages, merged


def test_a_page_the_engine_still_rejects_is_halved_and_asked_again(store):
    # the estimate allows one page of everything (a 100k window), the engine holds about a third of it
    res, backend = select(store, windowed(1500), page_by_window=True, window_tokens=100_000)
    rd = res.traversal.rounds[0]
    assert res.traversal.fallback is None and rd.resplit >= 2 and rd.too_long == 0 and rd.failed_prompts == 0
    assert len(backend.batches[0]) == 1 and len(backend.batches[1]) == 2  # the halves go out together
    health = system2_health([res.traversal.model_dump()], entity_round=False)
    assert health["resplit_pages"] == rd.resplit and health["too_long_prompts"] == 0 and health["fell_back"] == 0
    assert {h.id for h in res.context.entities if h.scores.get("s2") == 1.0} == \
        {category_id("g", 1, n) for n in WANTED}


def test_without_paging_the_long_prompt_fails_and_the_fallback_is_named(store):
    res, _ = select(store, windowed(1500), page_by_window=False, window_tokens=2048)
    assert res.traversal.fallback == "prompt_too_long" and res.traversal.rounds[0].too_long == 1
    res, _ = select(store, refuse_schema, page_by_window=True, window_tokens=2048)  # a refusal of another cause
    assert res.traversal.fallback == "llm_failure" and res.traversal.rounds[0].too_long == 0


def refuse_schema(req):
    raise ValueError("the engine cannot compile this request's schema")  # a scripted refusal of this very request


def test_split_pages_keeps_order_fits_room_and_balances():
    items = [f"n{i}" for i in range(10)]
    pages = split_pages(items, [10] * 10, 35)
    assert [x for p in pages for x in p] == items and all(len(p) * 10 <= 35 for p in pages)
    assert sorted(len(p) for p in pages) == [2, 2, 3, 3]
    assert split_pages(["big", "small"], [100, 1], 10) == [["big"], ["small"]]
    assert split_pages(items, [1] * 10, 100) == [items]
    with pytest.raises(ValueError, match="10 items but 9 costs"):
        split_pages(items, [1] * 9, 10)
    assert is_window_error("backend error: VLLMValidationError: This model's maximum context length is 8192")
    assert not is_window_error("backend error: timeout") and not is_window_error(None)
    # a prompt our limits layer did not send because it fills the window is a window error too (System-2 re-splits)
    assert is_window_error("not sent: a prompt of 9,120 tokens leaves no room for a reply (completion cap none, "
                           "window 8,192 (config; prompts counted by the tokenizer))")
