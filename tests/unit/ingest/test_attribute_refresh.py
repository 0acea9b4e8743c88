"""attribute_refresh="episode" (the paper): summaries rewritten after every episode, in order, cumulative,
one generate() per step across groups; resolution sees the current summaries; a kill resumes."""

from __future__ import annotations

import re

import pytest

from mnemis.ingest.attributes import EPISODE_STAGE, STALE_STAGE
from mnemis.testing.responder import entity_name, user_text
from mnemis.texts import entity_texts
from tests.helpers.ingest import current_message, episodes, graph, rule_responder, section

TURNS_A = [("Melanie", "I went to Paris with Caroline"), ("Caroline", "Mel, I live in Boston"),
           ("Melanie", "Caroline, I do pottery now"), ("Caroline", "Mel took pottery in Paris")]
TURNS_B = [("Jon", "Gina opened a Studio"), ("Gina", "Jon, I live in Rome")]


class Recorder:
    """Rule-based replies; an attribute request appends ``[<message>]`` to the summary it was shown,
    and every (entity, summary shown, message) is recorded in order."""

    def __init__(self):
        self.seen: list[tuple[str, str, str]] = []

    def __call__(self, req):
        if req.stage != "entity_attributes":
            return rule_responder(req)
        text = user_text(req)
        name = entity_name(req)
        prev = re.search(r"^Current summary: (.*)$", text, re.MULTILINE).group(1)
        prev = "" if prev == "(none yet)" else prev
        msg = current_message(req)
        self.seen.append((name, prev, msg))
        tag = "Person" if name in ("Melanie", "Caroline") else "Thing"
        return {"summary": f"{prev}[{msg}]", "tags": [tag]}


def test_summaries_accumulate_in_episode_order(build):
    rec = Recorder()
    builder, backend, store = build(rec, attribute_refresh="episode")
    eps = episodes("a", TURNS_A)
    builder.ingest(eps)
    mel = [(prev, msg) for name, prev, msg in rec.seen if name == "Melanie"]
    # Melanie is mentioned by every turn (speaker of 1 and 3, "Mel" elsewhere merges into her)
    assert [m for _, m in mel] == [e.content for e in eps]
    for k in range(1, len(mel)):  # each rewrite is shown the summary the previous one wrote
        assert mel[k][0] == mel[k - 1][0] + f"[{mel[k - 1][1]}]"
    stored = next(e for e in store.entities("a") if e.name == "Melanie")
    assert stored.summary == "".join(f"[{e.content}]" for e in eps)[:400] and stored.tags == ["Person"]
    # the end-of-build refresh does not run on top; every summary embedding is current
    assert all("CURRENT message" in user_text(r) for r in backend.requests if r.stage == "entity_attributes")
    ids, vecs = store.embeddings("a", "entity_summary")
    ents = {e.id: e for e in store.entities("a")}
    expect = builder.embedder.encode(entity_texts([ents[i] for i in ids]))
    assert sorted(ids) == sorted(ents) and (abs(vecs - expect) < 1e-5).all()
    assert not store.done(STALE_STAGE, "a") and store.done(EPISODE_STAGE, "a") == {e.id for e in eps}


def test_one_generate_per_step_across_groups(build):
    builder, backend, _ = build(Recorder(), attribute_refresh="episode")
    eps = episodes("a", TURNS_A) + episodes("b", TURNS_B)
    group_of = {e.content: e.group_id for e in eps}
    builder.ingest(eps)
    batches = backend.batches_for("entity_attributes")
    # one call per step (steps = the longest group's episodes), never one per group or per entity
    groups = [sorted({group_of[current_message(r)] for r in b}) for b in batches]
    assert groups == [["a", "b"]] * 2 + [["a"]] * 2
    assert all(r.stage == "entity_attributes" for b in batches for r in b)
    # the entities of one episode share the prompt up to their own part (prefix caching)
    for b in batches:
        heads = {(r.messages[0]["content"], user_text(r).split("\nEntity: ")[0]) for r in b}
        assert len(heads) == len({current_message(r) for r in b})
    # each step resolves, dedups, then summarises before the next step resolves
    order = [b[0].stage for b in backend.batches if b[0].stage in ("resolve_entities", "entity_attributes")]
    assert order.index("entity_attributes") < max(i for i, s in enumerate(order) if s == "resolve_entities")


def test_resolution_sees_the_current_summaries(build):
    builder, backend, _ = build(Recorder(), attribute_refresh="episode")
    builder.ingest(episodes("a", TURNS_A))
    (first, *_) = [r for r in backend.requests if r.stage == "resolve_entities"]
    known = section(first, "Known entities:")
    mel = next(k for k in known if k.startswith("Melanie"))
    assert mel.startswith("Melanie - [Melanie: I went to Paris")  # written after episode 1, shown at step 2


def test_default_end_mode_shows_empty_summaries_to_resolution(build):
    builder, backend, _ = build(Recorder())
    builder.ingest(episodes("a", TURNS_A))
    (first, *_) = [r for r in backend.requests if r.stage == "resolve_entities"]
    assert "Melanie" in section(first, "Known entities:")
    assert len(backend.batches_for("entity_attributes")) == 1  # once, at the end


class Kill(BaseException):
    pass


def test_killed_build_resumes_without_repeating_steps(build):
    ref, _, ref_store = build(Recorder(), attribute_refresh="episode")
    eps = episodes("a", TURNS_A) + episodes("b", TURNS_B)
    ref.ingest(eps)

    armed = {"on": True}
    rec = Recorder()

    def dies_at_third_summary_step(req):
        if armed["on"] and req.stage == "entity_attributes" and current_message(req) == eps[2].content:
            raise Kill  # inside step 3's batch: steps 1-2 are committed, step 3 is not
        return rec(req)

    builder, backend, store = build(dies_at_third_summary_step, attribute_refresh="episode")
    with pytest.raises(Kill):
        builder.ingest(eps)
    done_before = {g: set(store.done(EPISODE_STAGE, g)) for g in ("a", "b")}
    assert 0 < sum(map(len, done_before.values())) < len(eps)
    armed["on"] = False
    n = len(backend.requests)
    builder.ingest(eps)
    again = [current_message(r) for r in backend.requests[n:] if r.stage == "entity_attributes"]
    finished = {e.content for e in eps if e.id in done_before[e.group_id]}
    assert again and not finished & set(again)  # finished steps made no call
    assert {g: graph(store, g) for g in ("a", "b")} == {g: graph(ref_store, g) for g in ("a", "b")}


def test_attribute_refresh_is_validated(tmp_path):
    from mnemis.ingest.pipeline import BaseGraphBuilder
    from mnemis.store.sqlite import GraphStore

    with GraphStore(tmp_path / "m.db") as store, pytest.raises(ValueError, match="attribute_refresh"):
        BaseGraphBuilder(store, object(), object(), attribute_refresh="sometimes")
