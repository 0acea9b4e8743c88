"""The synthetic BEAM-10M-shaped conversation of the scale benchmark: its shape, seeded, and loadable."""

from __future__ import annotations

from collections import Counter

from mnemis.data.beam import ABILITIES, load_beam
from mnemis.testing.beam_synth import PLANS, TURNS_PER_BATCH, synthesize


def test_shape_and_load(tmp_path):
    info = synthesize(tmp_path / "a", tokens=60_000, chars_per_token=lambda texts: 4.0)
    data = load_beam(tmp_path / "a", scale="10M")
    assert data.groups == ["beam-10M-1"] and len(data.episodes) == info["messages"]
    assert info["batches"] >= PLANS and info["messages"] == info["batches"] * TURNS_PER_BATCH * 2
    assert info["chars"] >= 60_000 * 4.0 and Counter(q.category for q in data.questions) == {a: 2 for a in ABILITIES}
    assert len({e.session for e in data.episodes}) == info["batches"]  # a batch is a session across the plans
    assert not any("->->" in e.content for e in data.episodes)
    starts = [e.valid_at for e in data.episodes if e.turn == 0]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)  # anchors 3-10 days apart, in order
    ids = {e.id for e in data.episodes}
    assert all(q.evidence and set(q.evidence) <= ids for q in data.questions)
    user = [len(e.content) for e in data.episodes if e.speaker == "user"]
    assistant = [len(e.content) for e in data.episodes if e.speaker == "assistant"]
    assert 120 < sum(user) / len(user) < 600 and 2400 < sum(assistant) / len(assistant) < 5600
    synthesize(tmp_path / "b", tokens=60_000, chars_per_token=4.0)
    assert (tmp_path / "a" / "1" / "chat.json").read_bytes() == (tmp_path / "b" / "1" / "chat.json").read_bytes()
