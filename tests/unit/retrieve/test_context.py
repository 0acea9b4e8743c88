"""Context rendering: item formats, chronological episodes, a budget that never cuts an item."""

from __future__ import annotations

from datetime import datetime

import pytest

from mnemis.retrieve.context import approx_tokens, format_fact, render_context
from mnemis.types import Fact, Hit, RetrievedContext
from tests.helpers.system2 import build_store, cid, eid, ep_id


@pytest.fixture
def store(tmp_path):
    s = build_store(tmp_path / "m.db")
    yield s
    s.close()


def ctx(eps=(), ents=(), facts=(), group="g1"):
    mk = lambda kind, ids: [Hit(id=i, kind=kind, score=1.0) for i in ids]  # noqa: E731
    return RetrievedContext(
        question_id="q", group_id=group, episodes=mk("episode", eps), facts=mk("fact", facts),
        entities=[Hit(id=i, kind="category" if i.startswith("cat_") else "entity", score=1.0) for i in ents],
    )


def test_fact_date_ranges():
    f = Fact(group_id="g", id="f", source_id="a", target_id="b", relation="R", fact="Moved to Paris.",
             valid_at=datetime(2023, 6, 17))
    assert format_fact(f) == "Moved to Paris (2023-06-17 – now)"
    f2 = f.model_copy(update={"invalid_at": datetime(2023, 10, 4)})
    assert format_fact(f2) == "Moved to Paris (2023-06-17 – 2023-10-04)"
    f3 = f.model_copy(update={"valid_at": None})
    assert format_fact(f3) == "Moved to Paris"


def test_layout_and_chronological_episodes(store):
    c = ctx(eps=[ep_id("g1", 3), ep_id("g1", 0), ep_id("g1", 2)], ents=[cid("g1", 1, "Health"), eid("g1", "gastritis")],
            facts=["g1_f0"])
    [r] = render_context(store, [c], max_tokens=None)
    assert r.text == (
        "## Categories and entities\n"
        "- Health [health]\n"
        "- gastritis [gastritis]: gastritis appears in the chat.\n\n"
        "## Facts\n"
        "- Caroline has gastritis (2023-05-09 – now)\n\n"
        "## Conversation messages\n"
        "[2023/05/08 (Mon) 13:56] Caroline: I was diagnosed with gastritis last week.\n"
        "[2023/05/08 (Mon) 15:56] Melanie: Your guitar solo was great!\n"
        "[2023/05/08 (Mon) 16:56] Caroline: My sister paints landscapes."
    )
    assert r.included["episodes"] == [ep_id("g1", 0), ep_id("g1", 2), ep_id("g1", 3)]
    assert r.dropped == 0 and r.tokens == approx_tokens(r.text)


@pytest.mark.parametrize("budget", [0, 10, 25, 40, 60, 90, 130])
def test_budget_never_cuts_mid_item(store, budget):
    c = ctx(eps=[ep_id("g1", n) for n in range(4)], ents=[eid("g1", "Caroline"), eid("g1", "yoga")],
            facts=["g1_f0", "g1_f1", "g1_f2"])
    [full] = render_context(store, [c], max_tokens=None)
    [r] = render_context(store, [c], max_tokens=budget)
    assert r.tokens <= budget
    full_lines = set(full.text.splitlines())
    assert all(line in full_lines for line in r.text.splitlines() if line)  # whole lines only
    n_items = sum(len(v) for v in r.included.values())
    assert n_items + r.dropped == 9
    assert n_items == sum(1 for line in r.text.splitlines() if line and not line.startswith("## "))


def test_budget_keeps_best_ranked_items_of_each_type(store):
    c = ctx(eps=[ep_id("g1", 3), ep_id("g1", 0)], facts=["g1_f2", "g1_f0"])
    [r] = render_context(store, [c], max_tokens=45)
    assert r.included["episodes"] == [ep_id("g1", 3)] and r.included["facts"] == ["g1_f2"]


def test_custom_tokenizer_and_missing_items(store):
    c = ctx(eps=[ep_id("g1", 0), "g1:missing"])
    [r] = render_context(store, [c], max_tokens=5, tokenizer=lambda s: len(s.split()))
    assert r.dropped == 2 and r.text == ""  # the one real episode needs 11 words > 5
    [r2] = render_context(store, [c], max_tokens=50, tokenizer=lambda s: len(s.split()))
    assert r2.included["episodes"] == [ep_id("g1", 0)] and r2.dropped == 1
