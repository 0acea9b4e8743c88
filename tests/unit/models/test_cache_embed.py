from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from mnemis.models.cache import CachedReply, ResponseCache, request_key
from mnemis.models.embed import HashingEmbedder
from mnemis.models.llm.client import LLM
from mnemis.models.llm.scripted import ScriptedBackend
from mnemis.models.tiny import weights_fingerprint
from tests.helpers.models import GOOD, make_request


def _writer(args):
    cache_dir, worker = args
    cache = ResponseCache(cache_dir)
    for i in range(100):
        cache.put_many([(f"k{i}", "m", "s", CachedReply(f"w{worker}", 1, 1))])
        cache.put_many([(f"w{worker}-{i}", "m", "s", CachedReply("x", 1, 1))])
    llm = LLM(ScriptedBackend(lambda r: GOOD), cache_dir=cache_dir)
    return sum(r.ok for r in llm.generate([make_request(i) for i in range(30)]))


def test_cache_many_processes_same_dir(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        oks = pool.map(_writer, [(str(tmp_path), w) for w in range(4)])
    assert oks == [30] * 4
    cache = ResponseCache(tmp_path)
    assert len(cache) == 100 + 4 * 100 + 30
    keys = [request_key("scripted", make_request(i)) for i in range(30)]
    assert len(cache.get_many(keys)) == 30


def test_hashing_embedder_shape_norm_determinism():
    e = HashingEmbedder(dim=64)
    x = e.encode(["the cat sat on the mat", "", "The cat sat on the mat"], kind="query")
    assert x.shape == (3, 64) and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert np.allclose(x[0], x[2])
    assert e.encode([]).shape == (0, 64)
    with pytest.raises(ValueError):
        e.encode(["x"], kind="passage")


def test_weights_fingerprint_is_location_independent(tmp_path):
    a, b = tmp_path / "a" / "m", tmp_path / "b" / "m"
    for d in (a, b):
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"\x01" * 3000)
        (d / "config.json").write_text("{}")
    assert weights_fingerprint(a) == weights_fingerprint(b)
    (b / "model.safetensors").write_bytes(b"\x02" * 3000)
    assert weights_fingerprint(a) != weights_fingerprint(b)
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        weights_fingerprint(tmp_path / "does-not-exist")


@pytest.mark.parametrize("cls_name", ["SentenceTransformerEmbedder", "Qwen3Embedder"])
def test_missing_model_path_is_clear(cls_name, tmp_path):
    import mnemis.models.embed as embed

    missing = str(tmp_path / "no-such-model")
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        getattr(embed, cls_name)(missing)


@pytest.mark.parametrize("path", ["mnemis.models.rerank:CausalLMReranker", "mnemis.models.llm.hf_backend:HFBackend",
                                  "mnemis.models.llm.vllm_backend:VLLMBackend"])
def test_missing_model_path_is_clear_for_llms(path, tmp_path):
    import importlib

    mod, name = path.split(":")
    missing = str(tmp_path / "no-such-llm")
    with pytest.raises(FileNotFoundError, match="no-such-llm"):
        getattr(importlib.import_module(mod), name)(missing)


def test_client_imports_without_heavy_deps():
    import subprocess
    import sys

    code = ("import sys, mnemis.models.llm.client, mnemis.models.llm.scripted, mnemis.models.cache, "
            "mnemis.models.llm.openai_backend, mnemis.models.llm.vllm_backend, mnemis.models.llm.hf_backend, "
            "mnemis.models.rerank, mnemis.models.embed;"
            "bad = [m for m in ('vllm', 'torch', 'transformers', 'sentence_transformers', 'xgrammar') "
            "if m in sys.modules]; print(bad); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_matryoshka_dim_rule():
    from mnemis.models.embed import matryoshka_dim

    assert matryoshka_dim(None, 1024, "m") == 1024 and matryoshka_dim(128, 1024, "m") == 128
    for bad in (0, 1025, -3):
        with pytest.raises(ValueError, match=rf"dim={bad} must be in \[1, 1024\] for Qwen/x"):
            matryoshka_dim(bad, 1024, "Qwen/x")
