"""BM25-only RAG: found by name, it ranks a group's episodes by BM25 alone, on a store with no vectors and without
ever building an embedder, and reports its recall under its own name."""

from __future__ import annotations

import pytest

from mnemis.app.methods import make_methods
from mnemis.eval.route_recall import route_recall
from mnemis.method import MethodRun
from mnemis.render import format_episode
from mnemis.settings import load_settings
from mnemis.store.sqlite import GraphStore
from mnemis.types import Dataset
from tests.helpers.compose import plain_config
from tests.helpers.eval import make_episode, make_question

TEXTS = ["I love hiking in the alps", "my cat is called Tom", "we went to Paris last week", "pizza for dinner",
         "the cat chased a mouse in Paris"]


class NoEmbedder:
    """The run's models, where asking for the embedder fails the test."""

    @property
    def embedder(self):
        raise AssertionError("BM25-only RAG built an embedder")


@pytest.fixture
def world(tmp_path):
    settings = load_settings(plain_config(["experiment=quickstart", "retrieval.system1.k=2"]))
    eps = [make_episode("g0", i, i, text=t) for i, t in enumerate(TEXTS)]
    eps += [make_episode("g1", i, i, text="Paris in the spring, hiking and pizza") for i in range(2)]
    qs = [make_question(0, "g0", evidence=[eps[2].id]).model_copy(update={"question": "When did we go to Paris?"}),
          make_question(1, "g0", evidence=[eps[1].id]).model_copy(update={"question": "What is the cat called?"})]
    store = GraphStore(tmp_path / "memory.sqlite")
    store.upsert_episodes(eps)  # stored, never embedded
    data = Dataset(name="tiny", groups=["g0", "g1"], episodes=eps, questions=qs)
    yield MethodRun(settings, NoEmbedder(), data, store, tmp_path), eps, qs
    store.close()


def test_bm25_rag_ranks_by_bm25_alone_without_an_embedder(world):
    run, eps, qs = world
    (method,) = make_methods(["bm25_rag"])
    method.prepare(run)
    got = method.contexts(qs)
    got.check("bm25_rag", qs)
    paris, cat = got.retrieved
    assert [h.id for h in paris.episodes] == [eps[2].id, eps[4].id]  # only the g0 episodes naming Paris, no g1
    assert [h.id for h in cat.episodes][0] == eps[1].id  # "cat called": episode 1 beats episode 4's lone "cat"
    for ctx in got.retrieved:
        assert len(ctx.episodes) == 2 and not ctx.flags  # k episodes; no "unembedded" flag: no vector list
        assert all(set(h.scores) == {"bm25", "rrf"} for h in ctx.episodes)
        assert [h.scores["bm25"] for h in ctx.episodes] == sorted((h.scores["bm25"] for h in ctx.episodes),
                                                                  reverse=True)
    assert got.texts[0] == f"{format_episode(eps[2])}\n{format_episode(eps[4])}"  # rendered chronologically
    assert got.recall_routes == {"bm25_rag": got.retrieved} and got.files == {}
    recall = route_recall(run.store, qs, got.recall_routes)["bm25_rag"]["overall"]
    assert recall["direct"] == 1.0 and recall["n"] == 2
    assert run.settings.retrieval.system1.vector  # the run's own settings are left as they were (RAG's)
