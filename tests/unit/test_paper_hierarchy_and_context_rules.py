"""The last recorded differences of paper mode, each behind its config key (docs/fidelity.md): the categoriser's
re-ask of unplaced nodes (``hierarchy.reask``, ours), one-member categories (``hierarchy.keep_single_member``:
kept in paper mode, as the paper's prompt allows), the categorisation batch size (``hierarchy.batch_size``), the
paper prompt's check that every node is placed (``hierarchy.prompt=paper``) and facts dated to the minute in the
answer context (``retrieval.context.fact_dates``)."""

from __future__ import annotations

from datetime import datetime

import pytest

from mnemis.hierarchy import HierarchyConfig, build_hierarchies
from mnemis.retrieve.context import format_fact, render_context
from mnemis.types import Fact, Hit, RetrievedContext
from tests.helpers.compose import plain_config
from tests.helpers.hierarchy import (
    STAGE_CATEGORIZE,
    STAGE_REASK,
    by_map,
    make_entities,
    prompt_nodes,
    scripted,
    stage_calls,
)
from tests.helpers.system2 import build_store

SPEC = {"Dog": ["pet"], "Cat": ["pet"], "Oak": ["tree"], "Maple": ["tree"], "Guitar": ["instrument"],
        "Piano": ["instrument"]}
LAYER1 = {"Dog": ["Pets"], "Cat": ["Pets"], "Oak": ["Trees"], "Maple": ["Trees"], "Guitar": ["Strings"],
          "Piano": ["Keyboards"]}  # two categories of one member each


@pytest.fixture(scope="module")
def paper():
    return plain_config(["experiment=paper_locomo_k10"])


@pytest.fixture(scope="module")
def tuned():
    return plain_config(["experiment=quickstart"])


def _layer1(cfg: HierarchyConfig, reask=None):
    llm, backend = scripted(by_map({1: LAYER1}, reask=reask))
    built = build_hierarchies({"g": make_entities("g", SPEC)}, llm, cfg)["g"]
    return built, backend


def test_one_member_categories_are_kept_in_paper_mode_and_dissolved_in_ours(paper, tuned):
    assert paper["hierarchy"]["keep_single_member"] is True and tuned["hierarchy"]["keep_single_member"] is False
    kept, backend = _layer1(HierarchyConfig(max_layers=1, keep_single_member=True))
    assert sorted(c.name for c in kept.categories) == ["Keyboards", "Pets", "Strings", "Trees"]
    assert kept.metrics.dissolved == 0 and STAGE_REASK not in stage_calls(backend)
    ours, _ = _layer1(HierarchyConfig(max_layers=1, keep_single_member=False))
    assert ours.metrics.dissolved == 2 and "Keyboards" not in {c.name for c in ours.categories}


def test_the_reask_of_unplaced_nodes_is_ours_and_switchable(paper):
    assert paper["hierarchy"]["reask"] is True  # not in the paper; kept in paper mode (recorded)
    reask = {1: {"Guitar": ["Instruments"], "Piano": ["Instruments"]}}
    asked, backend = _layer1(HierarchyConfig(max_layers=1), reask=reask)
    assert STAGE_REASK in stage_calls(backend) and asked.metrics.reasked_nodes == 2
    assert "Instruments" in {c.name for c in asked.categories}
    off, backend = _layer1(HierarchyConfig(max_layers=1, reask=False), reask=reask)
    assert STAGE_REASK not in stage_calls(backend) and off.metrics.reasked_nodes == 0
    assert {"Guitar", "Piano"} <= {c.name for c in off.categories}  # promoted under their own names


def test_categorisation_batches_hold_at_most_batch_size_nodes(paper):
    assert paper["hierarchy"]["batch_size"] == 40  # not stated by the paper (recorded)
    spec = {f"Thing {i}": ["thing"] for i in range(85)}
    llm, backend = scripted(by_map({1: {}}))
    build_hierarchies({"g": make_entities("g", spec)}, llm, HierarchyConfig(max_layers=1, reask=False))
    sizes = [len(prompt_nodes(r)) for r in backend.requests if r.stage == STAGE_CATEGORIZE]
    assert len(sizes) == 3 and max(sizes) <= 40 and sum(sizes) == 85


def test_the_paper_prompt_checks_that_every_node_is_placed(paper):
    from mnemis.prompts.categorize import NodeView
    from mnemis.prompts.categorize_paper import CATEGORIZE_PAPER

    assert paper["hierarchy"]["prompt"] == "paper"
    nodes = [NodeView(n, ()) for n in ("Dog", "Cat", "Oak", "Maple", "Guitar", "Piano", "Violin")]
    user = CATEGORIZE_PAPER.render(nodes, 1)[-1]["content"]
    check = user.split("# Check before you answer\n", 1)[1]
    assert check.startswith("Every number from 1 to 7 must appear at least once.")


def _fact(**kw) -> Fact:
    return Fact(group_id="g1", id="g1_fx", source_id="a", target_id="b", relation="R", fact="Moved to Paris.",
                valid_at=datetime(2023, 5, 8, 13, 56), **kw)


def test_facts_in_the_answer_context_are_dated_to_the_minute_in_paper_mode(paper, tuned, tmp_path):
    assert paper["retrieval"]["context"]["fact_dates"] == "datetime"
    assert tuned["retrieval"]["context"]["fact_dates"] == "day"
    assert format_fact(_fact()) == "Moved to Paris (2023-05-08 – now)"
    assert format_fact(_fact(invalid_at=datetime(2023, 6, 1, 9, 0)), "datetime") == \
        "Moved to Paris (2023/05/08 (Mon) 13:56 – 2023/06/01 (Thu) 09:00)"
    store = build_store(tmp_path / "m.db")
    store.upsert_facts([_fact()])
    ctx = RetrievedContext(question_id="q", group_id="g1", facts=[Hit(id="g1_fx", kind="fact", score=1.0)])
    [minute] = render_context(store, [ctx], max_tokens=None, fact_dates="datetime")
    [day] = render_context(store, [ctx], max_tokens=None)
    store.close()
    assert "- Moved to Paris (2023/05/08 (Mon) 13:56 – now)" in minute.text
    assert "- Moved to Paris (2023-05-08 – now)" in day.text
    with pytest.raises(ValueError, match="retrieval.context.fact_dates must be one of"):
        render_context(build_store(tmp_path / "n.db"), [ctx], fact_dates="week")
