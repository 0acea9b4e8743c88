"""Shared by the System-1 tests and the subprocess that runs its Triton kernel path: queries over three
groups, an embedder without cosine ties, and the hit comparison."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

QUERIES = [("a", "Who likes hiking and pottery?"), ("b", "sushi and chess"), ("c", "guitar garden"),
           ("a", "marathon apartment"), ("b", "violin"), ("c", "camping with a puppy")]


class DenseEmbedder:
    """A dense pseudo-random unit vector per text: no two texts tie on cosine (the hashing embedder's sparse
    vectors tie often, and top-k breaks ties by position, which differs between one matrix and many)."""

    model_id = "dense-test-64"
    dim = 64

    def encode(self, texts, *, kind="document"):
        out = np.stack([np.random.default_rng(zlib.crc32(f"{kind}:{t}".encode())).normal(size=self.dim)
                        for t in texts]) if texts else np.zeros((0, self.dim))
        return (out / np.linalg.norm(out, axis=1, keepdims=True).clip(1e-9)).astype(np.float32)


def same_hits(got, want) -> None:
    """The same ids in the same order, scores equal to 1e-6, per group and item kind."""
    for g, w in zip(got, want):
        assert g.group_id == w.group_id
        for field in ("episodes", "entities", "facts"):
            gh, wh = getattr(g, field), getattr(w, field)
            assert [h.id for h in gh] == [h.id for h in wh], field
            assert [h.score for h in gh] == pytest.approx([h.score for h in wh], abs=1e-6)
