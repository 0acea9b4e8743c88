"""``examples/library_quickstart.py`` on the CPU defaults: the real SmolLM2 engine (shared), MiniLM and the
SmolLM2 reranker behind ``Memory``; structure, not the quality of a 135M model's answers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mnemis import Memory
from mnemis.models.llm.client import LLM

# slow: the default suite runs the example's own entry point with the CPU default embedder and a fake LLM
# (tests/unit/test_memory_api.py); this one adds the real SmolLM2 engine (1-2 minutes on 2 cores)
pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "library_quickstart.py"


def _example():
    spec = importlib.util.spec_from_file_location("library_quickstart", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_library_example_runs_on_the_cpu_defaults(vllm_backend, minilm, smollm2_reranker, tmp_path, capsys):
    example = _example()
    llm = LLM(vllm_backend, max_retries=1, reply_budget="fit")
    with Memory.from_models(llm, minilm, smollm2_reranker, overrides=["experiment=quickstart"],
                            path=tmp_path / "library.db") as memory:
        out = example.run(memory)
        assert out["counts"]["episodes"] == len(example.CHAT)
        assert len(out["answers"]) == len(example.QUESTIONS) == len(out["fused"].contexts)
        assert all(c.episodes and c.episodes[0].id.startswith("demo:") for c in out["system1"].contexts)
        assert out["fused"].system2 is not None and out["system1"].system2 is None
        assert llm.ledger.stage("answer").calls == len(example.QUESTIONS)
    printed = capsys.readouterr().out
    assert "Q: Who teaches Maya's pottery class?" in printed and "A: " in printed
