"""What a replay would otherwise recompute with floats or a tokenizer is cached and archived: embedding calls
(bit-exact, the model built only on a miss), reranker identities, token counts; a replay from the archive builds
no model."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from mnemis.components import Models, lazy_backend
from mnemis.models.cache import CacheMissError
from mnemis.models.cache_archive import export_archive, import_archive
from mnemis.models.embed import HashingEmbedder
from mnemis.models.embed_cache import CachedEmbedder, embedder_identity
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.models.rerank_cache import CachedReranker
from mnemis.models.token_counts import recorded_counter
from mnemis.settings import ModelSettings, PathsSettings


class _Noisy:
    """An embedder whose vectors depend on the call (as a CPU kernel's last bits can): a cache must pin them."""

    model_id = "noisy:8"
    dim = 8

    def __init__(self):
        self.calls = 0

    def encode(self, texts, *, kind="document"):
        self.calls += 1
        base = HashingEmbedder(8).encode(texts, kind=kind)
        return base + np.float32(1e-7) * self.calls


def test_a_call_is_computed_once_and_replayed_bit_for_bit(tmp_path):
    inner = _Noisy()
    first = CachedEmbedder(inner, tmp_path).encode(["a b", "c", "a b"], kind="document")
    assert inner.calls == 1 and first.dtype == np.float32 and first.shape == (3, 8)
    again = CachedEmbedder(inner, tmp_path).encode(["a b", "c", "a b"], kind="document")
    assert inner.calls == 1 and again.tobytes() == first.tobytes()
    # a vector can depend on its batch: another call (other texts, order or kind) is computed as it comes, and
    # keeps its own result, so each call replays as it was made
    reordered = CachedEmbedder(inner, tmp_path).encode(["c", "a b"], kind="document")
    CachedEmbedder(inner, tmp_path).encode(["c"], kind="query")
    assert inner.calls == 3 and reordered[0].tobytes() != first[1].tobytes()
    assert CachedEmbedder(inner, tmp_path).encode(["c", "a b"]).tobytes() == reordered.tobytes()
    assert inner.calls == 3 and CachedEmbedder(inner, tmp_path).encode([], kind="document").shape == (0, 8)


def test_identity_keys_the_vectors(tmp_path):
    a, b = HashingEmbedder(8), HashingEmbedder(16)
    assert embedder_identity(a) != embedder_identity(b)
    CachedEmbedder(a, tmp_path).encode(["x"])
    assert CachedEmbedder(b, tmp_path).encode(["x"]).shape == (1, 16)


def test_a_known_node_builds_no_model_until_a_miss(tmp_path):
    built = []

    def build():
        built.append(1)
        return HashingEmbedder(8)

    node = {"_target_": "mnemis.models.embed.HashingEmbedder", "dim": 8}
    vec = CachedEmbedder.for_node(node, build, tmp_path).encode(["x"])
    assert len(built) == 1
    lazy = CachedEmbedder.for_node(node, build, tmp_path)
    assert len(built) == 1 and lazy.dim == 8 and lazy.model_id == "hashing-8"
    assert not hasattr(lazy, "batch_size") and len(built) == 1  # probing an attribute loads nothing
    assert lazy.encode(["x"]).tobytes() == vec.tobytes() and len(built) == 1
    lazy.encode(["y"])
    assert len(built) == 2


def test_a_reranker_known_by_its_node_is_built_on_a_miss_only(tmp_path):
    built = []

    class Overlap:
        model_id, instruction = "overlap", "judge"

        def score(self, queries, documents):
            return np.array([len(set(q.split()) & set(d.split())) for q, d in zip(queries, documents)], dtype=float)

    def build():
        built.append(1)
        return Overlap()

    node = {"_target_": "x.Overlap"}
    CachedReranker.for_node(node, build, tmp_path).score("a b", ["a", "b c"])
    lazy = CachedReranker.for_node(node, build, tmp_path)
    assert lazy.score("a b", ["b c", "a"]).tolist() == [1.0, 1.0] and len(built) == 1
    lazy.score("a b", ["d"])
    assert len(built) == 2


def test_token_counts_are_recorded_and_a_replay_reads_them(tmp_path):
    llm = LLM(ScriptedBackend(lambda r: "x"), cache_dir=tmp_path / "llm")
    count = recorded_counter(llm)
    sizes = count(["one two three four five", "six"])
    assert sizes == [6, 1]  # the ~4 characters per token estimate: the scripted backend has no tokenizer
    replay = recorded_counter(LLM(ScriptedBackend(lambda r: "x"), cache_dir=tmp_path / "llm", cache_mode="replay_only"))
    assert replay(["six", "one two three four five"]) == [1, 6]
    with pytest.raises(CacheMissError, match="token_count"):
        replay(["never counted"])
    assert recorded_counter(LLM(ScriptedBackend(lambda r: "x"))) is None


def test_the_archive_carries_vectors_counts_and_identities_and_the_replay_loads_nothing(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    node = {"_target_": "mnemis.models.embed.HashingEmbedder", "dim": 8}
    inner = _Noisy()
    vecs = CachedEmbedder.for_node(node, lambda: inner, src / "embed").encode(["a b", "c"], kind="query")
    recorded_counter(LLM(ScriptedBackend(lambda r: "x"), cache_dir=src / "llm"))(["a line"])
    counts = export_archive(src, tmp_path / "a.cache.jsonl.gz")
    assert counts == {"llm": 0, "rerank": 0, "embed": 1, "tokens": 1, "identity": 1}
    assert import_archive(tmp_path / "a.cache.jsonl.gz", dst) == counts
    lazy = CachedEmbedder.for_node(node, lambda: pytest.fail("a replay must not build the embedder"), dst / "embed")
    assert lazy.encode(["a b", "c"], kind="query").tobytes() == vecs.tobytes()
    replay = recorded_counter(LLM(ScriptedBackend(lambda r: "x"), cache_dir=dst / "llm", cache_mode="replay_only"))
    assert replay(["a line"]) == [2]
    # a vector whose bytes do not match its size is refused, naming the line
    bad = tmp_path / "bad.cache.jsonl.gz"
    row = {"kind": "embed", "key": "k", "n": 1, "dim": 3, "vecs": "AAAA"}
    bad.write_bytes(gzip.compress((json.dumps(row) + "\n").encode()))
    with pytest.raises(ValueError, match=r"bad\.cache\.jsonl\.gz: line 1: embedding k: 3 bytes for 1 x 3 float32"):
        import_archive(bad, tmp_path / "x")


def test_a_replay_builds_llm_backends_lazily(tmp_path):
    node = {"_target_": "mnemis.models.llm.client.LLM",
            "backend": {"_target_": "mnemis.models.llm.vllm_backend.VLLMBackend", "model": "qwen2.5-coder-1.5b"}}
    assert lazy_backend(node)["backend"]["lazy"] is True
    scripted = {"_target_": "mnemis.models.llm.client.LLM",
                "backend": {"_target_": "mnemis.models.llm.scripted.SchemaFakeBackend"}}
    assert lazy_backend(scripted) == scripted  # a backend without a lazy start is left as it is
    # the packaged 1.5B model's identity needs none of its files: a replay constructs its client without them
    from mnemis.models.llm.vllm_backend import VLLMBackend

    backend = VLLMBackend("qwen2.5-coder-1.5b", lazy=True)
    assert backend.model_id.startswith("qwen2.5-coder-1.5b-instruct@") and backend._llm is None
    paths = PathsSettings(artifacts_dir=str(tmp_path), cache_dir=str(tmp_path), data_dir=None, shared_data_dir=None)
    models = Models(ModelSettings(llm=lazy_backend(node) | {"cache_dir": str(tmp_path), "cache_mode": "replay_only"},
                                  embedder=None, reranker=None, selector_llm=None, answer_llm=None, judge_llms={},
                                  paths=paths, rerank_cache=True, cache_mode="replay_only"))
    assert models.llm.backend._llm is None


def test_a_cached_model_is_built_only_as_the_model_its_entries_were_keyed_by():
    from mnemis.models.cache_identity import build_as_keyed

    assert build_as_keyed(lambda: "model-a", lambda m: m + "@1", "model-a@1", "embedder") == "model-a"
    with pytest.raises(ValueError, match="the reranker built has identity model-b@1, its cache entries were keyed "
                                         "model-a@1"):
        build_as_keyed(lambda: "model-b", lambda m: m + "@1", "model-a@1", "reranker")
