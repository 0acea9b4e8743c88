"""The Mem0 configs compose: defaults (our budget-matched variant), mode=paper / experiment=paper_locomo_mem0
(the Mem0 authors' evaluation), the graphiti ablation and the OpenAI embedder."""

from __future__ import annotations

import pytest

from mnemis.baselines.mem0.pipeline import Mem0Config
from mnemis.settings import Mem0Settings
from tests.helpers.compose import plain_config


def _cfg(overrides: list[str]) -> dict:
    return plain_config(overrides)


def _mem0(section: dict) -> Mem0Config:
    """The Mem0 baseline's record of a composed ``mem0`` / ``mem0g`` section (validated as the run validates it)."""
    return Mem0Config.from_settings(Mem0Settings.model_validate(section))


def test_defaults_are_one_store_per_conversation_k10():
    cfg = _cfg([])
    for m in ("mem0", "mem0g"):
        c = _mem0(cfg[m])
        assert (c.per_speaker, c.k, c.m, c.s, c.pair_size) == (False, 10, 10, 10, 2)
    assert _mem0(cfg["mem0g"]).graph_kind == "triples"
    assert cfg["fidelity"] == "tuned"


@pytest.mark.parametrize("overrides", [["experiment=paper_locomo_mem0"], ["mode=paper"],
                                       ["experiment=paper_locomo_mem0", "embedder=openai_compat"],
                                       ["experiment=paper_locomo_mem0", "dataset=longmemeval_s", "judge=longmemeval"]])
def test_paper_mode_is_the_mem0_evaluation(overrides):
    cfg = _cfg(overrides)
    mem0, mem0g = _mem0(cfg["mem0"]), _mem0(cfg["mem0g"])
    assert (mem0.per_speaker, mem0.k, mem0.graph) == (True, 30, False)
    assert (mem0g.per_speaker, mem0g.k, mem0g.graph, mem0g.graph_kind) == (True, 30, True, "triples")
    assert (mem0.m, mem0.s, mem0.pair_size) == (10, 10, 2)
    assert cfg["fidelity"] == "paper"
    if "experiment=paper_locomo_mem0" in overrides:
        assert cfg["methods"] == ["mem0", "mem0g"] and cfg["run_name"] == "paper_locomo_mem0"
    if "embedder=openai_compat" in overrides:
        assert cfg["embedder"]["_target_"] == "mnemis.models.openai_embed.OpenAIEmbedder"
        assert cfg["embedder"]["model"] == "text-embedding-3-small"


def test_ablations_compose_on_top_of_paper_mode():
    cfg = _cfg(["experiment=paper_locomo_mem0", "mem0g.graph_kind=graphiti", "mem0.per_speaker=false", "mem0.k=10"])
    assert _mem0(cfg["mem0g"]).graph_kind == "graphiti"
    mem0 = _mem0(cfg["mem0"])
    assert (mem0.per_speaker, mem0.k) == (False, 10)


@pytest.mark.slow  # ~8 s: one compose per command
def test_readme_commands_compose():
    """Every `mnemis run` line of experiments/paper/mem0/README.md composes (sweeps: their first job)."""
    import shlex
    from pathlib import Path

    readme = Path(__file__).resolve().parents[3] / "experiments" / "paper" / "mem0" / "README.md"
    lines = [ln for ln in readme.read_text().splitlines() if ln.startswith("mnemis run ")]
    assert len(lines) == 7
    for ln in lines:
        args = [a for a in shlex.split(ln.split("#")[0])[2:] if a != "-m"]
        args = [a.split(",")[0] if "," in a and "[" not in a else a for a in args]
        cfg = _cfg(args)
        for m in cfg["methods"]:
            if m in ("mem0", "mem0g"):
                _mem0(cfg[m])
