"""mode=paper retrieval values reach every paper experiment (and not the quickstart); every retrieval
ablation overlay restores exactly one of our defaults on top of mode=paper; collect.py puts each
ablation beside the mode=paper row."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from mnemis.config import CONF_DIR
from mnemis.eval.metrics import metrics_by_method
from mnemis.eval.records import QuestionRecord, dump_json, write_records
from mnemis.eval.run_dir import QUESTIONS_FILE
from tests.helpers.compose import plain_config

REPO = Path(__file__).resolve().parents[2]
PAPER_EXPERIMENTS = ["paper_locomo_k10", "paper_locomo_k30", "paper_locomo_baselines", "paper_locomo_mem0",
                     "paper_lme_s"]
RETRIEVAL_ABLATIONS = ["s1_bm25_text", "s1_query", "s1_rrf", "s2_caps", "s2_entity_round", "s2_prompt_split",
                       "s2_first_pick", "s2_every_pick", "s2_prompt_form", "context_day_dates", "s2_window_pages",
                       "fusion_rrf_routes", "fusion_s2_similarity",
                       "fusion_s2_weight"]
OTHER_ABLATIONS = ["ingest_summaries_end", "hierarchy_parallel", "answer_terse", "ingest_prompt_limits",
                   "hierarchy_prompt", "hierarchy_min_assignments", "ingest_builder_mnemis", "hierarchy_dissolve_single",
                   "hierarchy_two_step", "hierarchy_top_width"]
PAPER_S1 = {"rrf_k": 0, "weights": {"cosine": 1.0, "bm25": 1.0}, "query_normalize": False,
            "recipe": {"window": 0, "date": False, "neighbour_chars": 200, "self_weight": 1}}
PAPER_S2 = {"entity_round": False, "max_candidates_per_prompt": None, "max_facts_per_entity": None,
            "max_episodes_per_entity": None, "max_neighbours_per_entity": None, "max_items_per_type": None,
            "min_top_selections": 0, "min_lower_selections": 0, "prompt_form": "released", "page_by_window": False}


def _cfg(overrides: list[str]) -> dict[str, Any]:
    """Composed config as plain data (each composition is done once per session: ~1 s each)."""
    return plain_config(overrides)


def _load_collect():
    spec = importlib.util.spec_from_file_location("paper_collect_modes", REPO / "experiments" / "paper" / "collect.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


collect = _load_collect()


@pytest.fixture(scope="module")
def tuned() -> dict[str, Any]:
    return _cfg([])


@pytest.mark.parametrize("experiment", PAPER_EXPERIMENTS)
def test_paper_experiments_resolve_to_the_paper_retrieval(experiment):
    cfg = _cfg([f"experiment={experiment}"])
    assert cfg["fidelity"] == "paper" and cfg["ablation"] is None
    s1, s2 = cfg["retrieval"]["system1"], cfg["retrieval"]["system2"]
    assert {k: s1[k] for k in PAPER_S1} == PAPER_S1
    assert s1["bm25_params"]["stem"] is False and s1["bm25_params"]["stopwords"] is False
    assert {k: s2[k] for k in PAPER_S2} == PAPER_S2


def test_quickstart_and_the_default_keep_the_tuned_retrieval(tuned):
    for cfg in (tuned, _cfg(["experiment=quickstart"])):
        assert cfg["fidelity"] == "tuned"
        s1, s2 = cfg["retrieval"]["system1"], cfg["retrieval"]["system2"]
        assert s1["rrf_k"] == 10 and s1["weights"] == {"cosine": 1.0, "bm25": 3.0} and s1["query_normalize"]
        assert s1["recipe"] == {"window": 2, "date": True, "neighbour_chars": 200, "self_weight": 2}
        assert s1["bm25_params"]["stem"] and s2["entity_round"] is True
        assert s2["max_facts_per_entity"] == 10 and s2["max_candidates_per_prompt"] == 60
    assert _cfg(["experiment=quickstart"])["retrieval"]["system2"]["max_items_per_type"] == 20


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_leaves(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def test_every_retrieval_departure_has_an_ablation():
    assert set(RETRIEVAL_ABLATIONS) <= set(collect.ablations())
    paper = _leaves(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "mode" / "paper.yaml"))["retrieval"])
    covered = set()
    for name in RETRIEVAL_ABLATIONS:
        node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "ablation" / f"{name}.yaml"))
        covered |= set(_leaves(node.get("retrieval", {})))
    # every paper-mode retrieval key is restored to our default by some ablation; reply budgets are no
    # departure (the default reply_budget=raise lifts a configured budget to the same worst case)
    departures = {k for k in paper if not k.endswith("max_tokens")}
    assert departures <= covered, sorted(departures - covered)


@pytest.mark.parametrize("name", RETRIEVAL_ABLATIONS + OTHER_ABLATIONS)
def test_ablation_restores_exactly_our_default(name, tuned):
    cfg = _cfg(["experiment=paper_locomo_k10", f"ablation={name}"])
    base = _cfg(["experiment=paper_locomo_k10"])
    assert cfg["ablation"] == name and cfg["fidelity"] == "paper"
    node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "ablation" / f"{name}.yaml"))
    keys = {k: v for section in ("retrieval", "ingest", "hierarchy", "answer")
            for k, v in _leaves(node.get(section, {}), f"{section}.").items()}
    assert keys
    got, want, paper = _leaves(cfg), _leaves(tuned), _leaves(base)
    for key in keys:
        assert got[key] == want[key], f"{name}: {key} = {got[key]!r}, our default is {want[key]!r}"
    assert any(paper[k] != want[k] for k in keys), f"{name} changes nothing in mode=paper"
    # everything else stays as in mode=paper
    assert {k: v for k, v in got.items() if k not in keys and k != "ablation"} == \
           {k: v for k, v in paper.items() if k not in keys and k != "ablation"}


def test_every_ablation_overlay_is_listed_and_tested():
    assert set(collect.ablations()) == set(RETRIEVAL_ABLATIONS + OTHER_ABLATIONS)


def test_ablation_sweeps_reuse_the_paper_build():
    from mnemis.app.jobs import build_address
    from mnemis.settings import load_settings

    base = build_address(load_settings(_cfg(["experiment=paper_locomo_k10"])))
    for name in RETRIEVAL_ABLATIONS + ["answer_terse"]:
        assert build_address(load_settings(_cfg(["experiment=paper_locomo_k10", f"ablation={name}"]))) == base
    for name in ("ingest_summaries_end", "hierarchy_parallel", "hierarchy_two_step", "hierarchy_top_width"):
        # build keys: a memory of their own
        assert build_address(load_settings(_cfg(["experiment=paper_locomo_k10", f"ablation={name}"]))) != base


def test_readme_lists_every_ablation():
    readme = (REPO / "experiments" / "paper" / "README.md").read_text()
    sweep = next(x for x in readme.splitlines() if x.startswith("mnemis run -m experiment=paper_locomo_k10 ablation="))
    names = sweep.split("ablation=", 1)[1].split()[0].split(",")
    assert sorted(names) == sorted(collect.ablations())
    for name in collect.ablations():
        assert f"`{name}`" in readme
    assert "mnemis run experiment=paper_locomo_k10 mode=tuned" in readme


# ------------------------------------------------------------------------------------------ collect
CATS = collect.LOCOMO_CATS


def _run_dir(path: Path, overrides: list[str], right: int, mtime: float) -> Path:
    path.mkdir(parents=True)
    cfg = _cfg(overrides)
    (path / "config.json").write_text(json.dumps(cfg))
    recs = [QuestionRecord(method="mnemis", question_id=f"{c}:{i}", group_id=f"g{i % 2}", category=c, question="q?",
                           gold="a", answer="a", labels={"main": i < right}) for c in CATS for i in range(10)]
    write_records(path / QUESTIONS_FILE, recs)
    dump_json(path / "metrics.json", metrics_by_method(recs, n_boot=50))
    os.utime(path / "config.json", (mtime, mtime))
    return path


def test_collect_puts_each_ablation_beside_the_paper_mode_row(tmp_path):
    root = tmp_path / "sweep"
    paper = _run_dir(root / "paper", ["experiment=paper_locomo_k10"], 8, 100.0)
    runs = {n: _run_dir(root / n, ["experiment=paper_locomo_k10", f"ablation={n}"], 5 + i % 4, 200.0 + i)
            for i, n in enumerate(RETRIEVAL_ABLATIONS)}
    tuned = _run_dir(root / "tuned", ["experiment=paper_locomo_k10", "mode=tuned"], 9, 300.0)
    cands = collect.load_candidates(collect.find_runs([root]))
    result = collect.collect(collect.TABLES["ablations"], cands)
    rows = {r["label"]: r for r in result["rows"]}
    assert rows["mode=paper"]["run"] == paper and rows["mode=paper"]["paper"][-1] == 93.3
    for name, run in runs.items():
        assert rows[f"+ {name}"]["run"] == run
    assert rows["mode=tuned (all our defaults)"]["run"] == tuned
    md = collect.to_markdown(result, root)
    head = next(x for x in md.splitlines() if x.startswith("| Setting"))
    assert "Δ vs mode=paper" in head
    col = head.split(" | ").index("Δ vs mode=paper")
    line = next(x for x in md.splitlines() if x.startswith("| + s2_caps |"))
    i = RETRIEVAL_ABLATIONS.index("s2_caps")
    assert line.split(" | ")[col] == f"{10 * ((5 + i % 4) - 8):+.1f}"
    assert next(x for x in md.splitlines() if x.startswith("| mode=tuned")).split(" | ")[col] == "+10.0"
    assert "`s2_caps`: System-2 one-hop expansion capped" in md
    # the paper tables take the mode=paper run only, never an ablation or mode=tuned run
    t1 = {r["label"]: r for r in collect.collect(collect.TABLES["table1"], cands)["rows"]}
    assert t1["Mnemis (k=10)"]["run"] == paper and t1["Mnemis (k=10)"]["others"] == []
