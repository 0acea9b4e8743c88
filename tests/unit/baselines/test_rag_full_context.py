from __future__ import annotations

import logging

import pytest

from mnemis.baselines.full_context import full_context, render_history
from mnemis.models.token_counts import estimate_tokens, token_counter
from mnemis.baselines.rag import rag_contexts, render_episode_hits
from mnemis.render import format_episode, render_episodes
from mnemis.types import Hit, RetrievedContext
from tests.helpers.eval import make_episode, make_question


def test_format_episode():
    ep = make_episode("g", 3, 56, speaker="Caroline", text="I went to a support group yesterday.")
    assert format_episode(ep) == "[2023/05/08 (Mon) 13:56] Caroline: I went to a support group yesterday."
    bare = ep.model_copy(update={"content": "hello\nthere"})
    assert format_episode(bare) == "[2023/05/08 (Mon) 13:56] Caroline: hello there"
    shuffled = [make_episode("g", i, 10 - i) for i in range(3)]
    assert render_episodes(shuffled).splitlines()[0].startswith("[2023/05/08 (Mon) 13:08]")


def test_full_context_keeps_the_newest_episodes_and_counts(caplog):
    long_group = [make_episode("g0", i, i, text="x" * 36) for i in range(20)]  # ~12 tokens a line
    short_group = [make_episode("g1", i, i) for i in range(2)]
    qs = [make_question(0, "g0"), make_question(1, "g0"), make_question(2, "g1")]
    with caplog.at_level(logging.WARNING):
        fc = full_context(long_group + short_group, qs, max_model_len=150, reserve=50)
    assert fc.budget == 100
    assert fc.truncated == [True, True, False] and fc.n_truncated == 2
    kept = fc.kept_episodes["g0"]
    assert 0 < kept < 20 and fc.context_tokens["g0"] <= 100
    lines = fc.contexts[0].splitlines()
    assert lines == [format_episode(e) for e in long_group[-kept:]]  # the newest, in time order
    assert fc.contexts[0] == fc.contexts[1] and fc.contexts[2].count("\n") == 1
    assert "truncated" in caplog.text and fc.summary()["truncated_groups"] == ["g0"]
    with pytest.raises(ValueError):
        full_context(long_group, qs, max_model_len=100, reserve=100)


def test_token_counting_prefers_a_tokenizer():
    class Tok:
        def encode(self, text, add_special_tokens=False):
            return text.split()

    class Backend:
        def get_tokenizer(self):
            return Tok()

    class Client:
        backend = Backend()

    assert token_counter(Client())(["a b c", "d"]) == [3, 1]
    assert token_counter(tokenizer=Tok())(["a b"]) == [2]
    assert token_counter(object()) is estimate_tokens and estimate_tokens(["abcdefgh", ""]) == [2, 1]
    text, kept, used = render_history([make_episode("g", 0, 0)], 10_000, token_counter(tokenizer=Tok()))
    assert kept == 1 and used == len(text.split())
    assert render_history([], 5) == ("", 0, 0)


def test_rag_renders_hits_chronologically(tmp_path):
    from mnemis.store.sqlite import GraphStore

    store = GraphStore(tmp_path / "m.db")
    texts = ["I love hiking in the alps", "my cat is called Tom", "we went to Paris last week", "pizza for dinner"]
    eps = [make_episode("g0", i, i, text=t) for i, t in enumerate(texts)]
    store.upsert_episodes(eps)
    ctx = RetrievedContext(question_id="q", group_id="g0", episodes=[
        Hit(id=eps[2].id, kind="episode", score=1.0), Hit(id=eps[0].id, kind="episode", score=0.5)])
    empty = RetrievedContext(question_id="q2", group_id="g0")
    assert render_episode_hits(store, [ctx, empty]) == [f"{format_episode(eps[0])}\n{format_episode(eps[2])}", ""]
    q = make_question(0, "g0").model_copy(update={"question": "Which city did we visit, Paris?"})
    rendered, retrieved = rag_contexts(store, None, [q], k=2, vector=False, cache_dir=None)
    assert len(retrieved[0].episodes) == 2 and format_episode(eps[2]) in rendered[0]
    assert retrieved[0].question_id == q.id
    store.close()
