"""mode=paper sets the paper's ingest and hierarchy behaviour in every paper experiment; the quickstart and
the plain defaults keep ours; each remaining default departure has a one-line ablation override."""

from __future__ import annotations

import pytest

from mnemis.config import CONF_DIR
from mnemis.hierarchy import HierarchyConfig
from tests.helpers.compose import plain_config

PAPER_EXPERIMENTS = ["paper_locomo_k10", "paper_locomo_k30", "paper_locomo_baselines", "paper_locomo_mem0",
                     "paper_lme_s"]
PAPER_VALUES = {
    ("ingest", "attribute_refresh"): "episode",
    ("ingest", "per_item_candidates"): True,
    ("hierarchy", "sequential_batches"): True,
    ("hierarchy", "existing_descriptions"): True,
    ("hierarchy", "max_existing"): None,
    ("hierarchy", "prompt"): "paper",
    ("hierarchy", "layer_rule"): "no_growth",
    ("hierarchy", "categorizer"): "one_step",
    ("hierarchy", "top_width"): None,
}
DEFAULT_VALUES = {**PAPER_VALUES, ("ingest", "attribute_refresh"): "end",
                  ("hierarchy", "sequential_batches"): False, ("hierarchy", "existing_descriptions"): False,
                  ("hierarchy", "max_existing"): 60, ("hierarchy", "prompt"): "ours",
                  ("hierarchy", "layer_rule"): "shrink", ("hierarchy", "categorizer"): "two_step",
                  ("hierarchy", "top_width"): 8}


def _values(cfg):
    return {(sec, key): cfg[sec][key] for sec, key in PAPER_VALUES}


def test_every_paper_experiment_is_listed():
    assert sorted(PAPER_EXPERIMENTS) == sorted(p.stem for p in (CONF_DIR / "experiment").glob("paper_*.yaml"))


@pytest.mark.parametrize("exp", PAPER_EXPERIMENTS)
def test_paper_experiments_get_the_paper_values(exp):
    cfg = plain_config([f"experiment={exp}"])
    assert cfg["fidelity"] == "paper" and _values(cfg) == PAPER_VALUES
    assert cfg["embedder"]["dtype"] == "float32"  # the authors' metrics files: Precision.FLOAT32
    HierarchyConfig.coerce(cfg["hierarchy"])  # binds


@pytest.mark.parametrize("overrides", [[], ["experiment=quickstart"]])
def test_defaults_and_quickstart_keep_ours(overrides):
    assert _values(plain_config(overrides)) == DEFAULT_VALUES


ABLATIONS = {  # the override that puts each remaining default back into a paper run
    "ingest.attribute_refresh=end": (("ingest", "attribute_refresh"), "end"),
    "hierarchy.sequential_batches=false": (("hierarchy", "sequential_batches"), False),
    "hierarchy.existing_descriptions=false": (("hierarchy", "existing_descriptions"), False),
    "hierarchy.max_existing=60": (("hierarchy", "max_existing"), 60),
    "ingest.per_item_candidates=false": (("ingest", "per_item_candidates"), False),
    "hierarchy.prompt=ours": (("hierarchy", "prompt"), "ours"),
    "hierarchy.layer_rule=shrink": (("hierarchy", "layer_rule"), "shrink"),
    "hierarchy.categorizer=two_step": (("hierarchy", "categorizer"), "two_step"),
    "hierarchy.top_width=8": (("hierarchy", "top_width"), 8),
}


def test_ablations_override_paper_mode():
    cfg = plain_config(["experiment=paper_locomo_k10", *ABLATIONS])
    assert cfg["fidelity"] == "paper"
    assert _values(cfg) == dict(ABLATIONS.values())
