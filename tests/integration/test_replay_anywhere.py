"""A run's archive replays to the same figures under another torch kernel path and another thread count, with no
model loaded: the embeddings (real MiniLM vectors, whose last bits depend on the CPU kernels) and the token counts
travel in the archive, the LLM client of a replay never starts an engine."""

from __future__ import annotations

import json

import pytest

from mnemis.testing.bench_replay import models_loaded
from tests.helpers.bench import load_bench

pytestmark = pytest.mark.integration
NUMPY_AVX512 = "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"


def test_a_replay_reproduces_every_figure_under_two_kernel_paths_and_thread_counts(tmp_path, locomo_path,
                                                                                   monkeypatch):
    cq = load_bench("cpu_quality")
    out = tmp_path / "results" / "q.json"
    small = ["llm=schema_fake", "embedder=minilm", "reranker=cosine", "dataset.slice.sessions=[1,1]",
             "dataset.slice.max_questions=3", "methods=[mnemis,rag,full_context]", "judge.leniency.n=2",
             "retrieval.fusion.scorer=reranker",  # the paper's fusion: the reranker's scores are archived too
             "judge.longmemeval_format=reasoned", f"paths.cache_dir={tmp_path}/cache",
             f"paths.artifacts_dir={tmp_path}/art", f"paths.shared_data_dir={locomo_path.parent}"]
    assert cq.main(["--modes", "tuned", "--runs-dir", str(tmp_path / "runs"), "--out", str(out), "--archive",
                    "--", *small]) == 0
    made = json.loads(out.read_text())
    assert made["cache_archive"]["embed"] > 0 and made["cache_archive"]["tokens"] > 0
    assert made["cache_archive"]["identity"] == 2  # the embedder's and the reranker's
    assert "embedder" in models_loaded([tmp_path / "runs" / "tuned"])  # the run itself embedded
    # torch's scalar kernels, numpy's and the BLAS libraries' without AVX-512, one thread; then this CPU's best, two
    plain = {"ATEN_CPU_CAPABILITY": "default", "NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512,
             "OPENBLAS_CORETYPE": "Haswell", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    for env, threads in ((plain, "1"), ({}, "2")):
        for key in plain:
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        assert cq.main(["--replay", "--archive", "--out", str(out)]) == 0
        replayed = json.loads(out.read_text())
        assert replayed["replay"]["every_figure_reproduced"] and replayed["replay"]["models_loaded"] == []
        assert replayed["replay"]["env"].get("OMP_NUM_THREADS") == threads
