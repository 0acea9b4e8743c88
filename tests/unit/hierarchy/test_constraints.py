"""Pure constraint functions: name rules, reply repair, dissolution, promotion, shrink rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemis.hierarchy.constraints import (
    Draft,
    Repairs,
    balanced_chunks,
    clean_name,
    clean_tags,
    dissolve_small,
    is_joined_name,
    layer_shrinks,
    merge_assignments,
    parse_assignments,
    promote,
    unassigned,
)
from mnemis.prompts.categorize import Assignment


@pytest.mark.parametrize("name", ["Food and Drink", "food AND drink", "R&D", "Arts & Crafts", "and"])
def test_joined_names_are_detected(name):
    assert is_joined_name(name)


@pytest.mark.parametrize("name", ["Android Devices", "Brand Loyalty", "Sandwiches", "Pets", "Band Members"])
def test_single_concepts_pass(name):
    assert not is_joined_name(name)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("  Pets ", "Pets"),
        ('"Pets".', "Pets"),
        ("3. Musical   Instruments", "Musical Instruments"),
        ("**Trees**", "Trees"),
        ("", ""),
        ("  - ", ""),
        ("...", ""),
        ("a b c d e f g h", "a b c d e f"),
    ],
)
def test_clean_name(raw, clean):
    assert clean_name(raw) == clean


def test_clean_tags_limits_count_and_words():
    tags = clean_tags(["one", "two words", "a very long tag phrase", "One", "", "x", "y", "z"])
    assert tags == ["one", "two words", "a very long", "x", "y"]


def test_parse_assignments_repairs_and_counts():
    rep = Repairs()
    items = [
        Assignment(category="Pets", indexes=[1, 2, 2, 9, 0]),
        Assignment(category="  ", indexes=[3]),
        Assignment(category="Food and Drink", indexes=[3]),
        Assignment(category="Trees", indexes=[42]),
        Assignment(category="Tools", indexes=[3, 4]),
    ]
    out = parse_assignments(items, 4, rep)
    assert out == [("Pets", [0, 1]), ("Tools", [2, 3])]
    assert (rep.out_of_range, rep.duplicate_indexes, rep.empty_names, rep.empty_assignments) == (3, 1, 1, 1)
    assert rep.rejected_names == ["Food and Drink"] and rep.empty_replies == 0


def test_reply_covering_no_node_is_counted():
    rep = Repairs()
    assert parse_assignments([Assignment(category="X", indexes=[7])], 3, rep) == []
    assert parse_assignments([], 3, rep) == []
    assert rep.empty_replies == 2 and rep.empty_assignments == 1


def test_merge_by_normalised_name_keeps_many_to_many():
    drafts: dict[str, Draft] = {}
    merge_assignments(drafts, [("Pets", [0, 1]), ("Animals", [0])], ["a", "b"])
    merge_assignments(drafts, [("pets", [0]), ("Animals", [1])], ["c", "d"])
    assert {d.name: d.children for d in drafts.values()} == {"Pets": ["a", "b", "c"], "Animals": ["a", "d"]}
    assert unassigned(["a", "b", "c", "d", "e"], drafts) == ["e"]


def test_dissolve_small_spares_rule_and_promoted():
    drafts = {
        "big": Draft("Big", ["a", "b"]),
        "small": Draft("Small", ["c"]),
        "speaker": Draft("Speaker", ["s"], rule=True),
        "p": Draft("P", ["p"], promoted=True),
    }
    assert dissolve_small(drafts, 2) == ["Small"]
    assert sorted(drafts) == ["big", "p", "speaker"]
    assert dissolve_small(drafts, 3) == ["Big"]


def test_promote_creates_single_child_or_reattaches_by_name():
    rep = Repairs()
    drafts = {"pets": Draft("Pets", ["a", "b"])}
    created = promote(drafts, [("x", "Guitar"), ("y", "pets"), ("z", "guitar")], rep)
    assert drafts["guitar"].children == ["x", "z"] and drafts["guitar"].promoted
    assert drafts["pets"].children == ["a", "b", "y"] and not drafts["pets"].promoted
    assert rep.reattached == 2 and created == 1
    assert promote(drafts, [("w", "Oak")], rep) == 1 and drafts["oak"].promoted


@pytest.mark.parametrize(
    ("layer", "new", "lower", "ok", "paper"),
    [(1, 9, 9, True, True), (2, 4, 5, True, True), (2, 5, 5, False, True), (3, 6, 5, False, False)],
)
def test_layer_shrinks(layer, new, lower, ok, paper):
    assert layer_shrinks(layer, new, lower) is ok  # ours: strictly smaller
    assert layer_shrinks(layer, new, lower, "no_growth") is paper  # the paper: no more nodes than below
    with pytest.raises(ValueError, match="layer rule"):
        layer_shrinks(layer, new, lower, "smaller")


@given(st.lists(st.text(min_size=1, max_size=3), max_size=60), st.integers(1, 12))
def test_balanced_chunks_cover_in_order(items, size):
    chunks = balanced_chunks(items, size)
    assert [x for c in chunks for x in c] == items
    assert all(0 < len(c) <= size for c in chunks)
    if chunks:
        assert max(map(len, chunks)) - min(map(len, chunks)) <= 1
