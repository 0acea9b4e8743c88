"""Every conf/llm, conf/embedder and conf/reranker YAML names a real target whose signature accepts its keys.

No weights are loaded: targets are imported and ``inspect.signature(target).bind(**kwargs)`` is checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers.config_targets import bind_targets

CONF = Path(__file__).resolve().parents[3] / "conf"
GROUPS = ("llm", "embedder", "reranker")
FILES = sorted(p for g in GROUPS for p in (CONF / g).glob("*.yaml"))
DUMMY = {"paths": {"cache_dir": "cache-root"}, "cache_mode": "readwrite"}


def test_all_groups_have_configs():
    names = {p.parent.name + "/" + p.stem for p in FILES}
    for expected in ("llm/smollm2_vllm_cpu", "llm/smollm2_hf_cpu", "llm/qwen3_8b_vllm", "llm/qwen3_32b_vllm",
                     "llm/openai_compat", "embedder/minilm", "embedder/qwen3_0_6b_128", "embedder/qwen3_8b",
                     "embedder/hashing", "reranker/smollm2_cpu", "reranker/qwen3_0_6b", "reranker/qwen3_8b",
                     "reranker/cosine", "reranker/bge_reranker_v2_m3", "reranker/qwen3_8b_vllm", "reranker/qwen3_0_6b_vllm"):
        assert expected in names


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_config_binds_to_target(path):
    cfg = OmegaConf.merge(OmegaConf.create(DUMMY), {"node": OmegaConf.load(path)})
    node = OmegaConf.to_container(cfg.node, resolve=True)
    assert bind_targets(node, str(path.relative_to(CONF))) >= 1
    if path.parent.name == "llm":
        assert node["cache_dir"] == "cache-root/llm" and "backend" in node


def test_cosine_partial_builds_with_embedder():
    from hydra.utils import instantiate

    from mnemis.models.embed import HashingEmbedder

    factory = instantiate(OmegaConf.load(CONF / "reranker" / "cosine.yaml"))
    rr = factory(embedder=instantiate(OmegaConf.load(CONF / "embedder" / "hashing.yaml")))
    s = rr.score("red apple", ["red apple pie", "blue ocean"])
    assert s.shape == (2,) and s[0] > s[1]
    assert isinstance(rr.embedder, HashingEmbedder)


def test_openai_compat_llm_config_instantiates_without_a_server(tmp_path):
    """The llm node shape (client + nested backend) instantiates end to end with a weight-free backend."""
    from hydra.utils import instantiate

    cfg = OmegaConf.load(CONF / "llm" / "openai_compat.yaml")
    cfg = OmegaConf.merge(OmegaConf.create({"paths": {"cache_dir": str(tmp_path)}, "cache_mode": "readwrite"}),
                          {"llm": cfg})
    llm = instantiate(cfg.llm, _convert_="all")
    assert llm.model_id == "openai:Qwen/Qwen3-8B" and llm.cache is not None


@pytest.mark.parametrize("path", sorted((CONF / "llm").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_llm_client_config_reads_the_run_level_llm_keys(path: Path):
    """`reply_budget=...`, `retry_failed=...` and `llm_chunk_size=...` on the command line reach every LLM client
    config (a config without the line would silently keep the client's default)."""
    node = OmegaConf.load(path)
    if node.get("_target_") != "mnemis.models.llm.client.LLM":
        pytest.skip("not the LLM client")
    raw = OmegaConf.to_container(node, resolve=False)
    assert raw.get("reply_budget") == "${oc.select:reply_budget,raise}", path.name
    assert raw.get("retry_failed") == "${oc.select:retry_failed,false}", path.name
    assert raw.get("chunk_size") == "${oc.select:llm_chunk_size,1024}", path.name
