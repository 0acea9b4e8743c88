"""``conf/hparams_search``: an Optuna search (hydra-optuna-sweeper, the ``sweep`` extra) whose trials return the
figure ``optimized_metric`` names (:mod:`mnemis.app.objective`); the quickstart search runs end to end on the
schema-fake LLM, the hashing embedder and the cosine reranker."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mnemis.app.objective import read_metric, sweep_objective
from mnemis.config import CONF_DIR

REPO = Path(__file__).resolve().parents[2]
SEARCHES = sorted(p.stem for p in (CONF_DIR / "hparams_search").glob("*.yaml"))


def _need_optuna() -> None:
    if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        msg = "hydra-optuna-sweeper is not installed (pip install -e '.[sweep]')"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"{msg}; CI installs the sweep extra, so this is a failure")
        pytest.skip(msg)


def test_read_metric_follows_the_key_path(tmp_path):
    (tmp_path / "recall.json").write_text(json.dumps({"mnemis/system1": {"overall": {"mrr": 0.5, "n": 4}},
                                                      "bad": {"x": "text", "flag": True}}))
    assert read_metric(tmp_path, "recall.json#mnemis/system1.overall.mrr") == 0.5
    assert sweep_objective({"optimized_metric": "recall.json#mnemis/system1.overall.n"}, tmp_path) == 4.0
    assert sweep_objective({"optimized_metric": None}, tmp_path) is None and sweep_objective({}, tmp_path) is None
    with pytest.raises(ValueError, match=r"no key 'recall@99'.*there: \['mrr', 'n'\]"):
        read_metric(tmp_path, "recall.json#mnemis/system1.overall.recall@99")
    with pytest.raises(ValueError, match="wrote no metrics.json"):
        read_metric(tmp_path, "metrics.json#a")
    with pytest.raises(ValueError, match="expected '<file>.json#<key>"):
        read_metric(tmp_path, "recall.json")
    for key in ("bad.x", "bad.flag"):
        with pytest.raises(TypeError, match="not a number"):
            read_metric(tmp_path, f"recall.json#{key}")


def test_the_default_config_returns_nothing():
    cfg = yaml.safe_load((CONF_DIR / "config.yaml").read_text())
    assert cfg["optimized_metric"] is None
    assert {"hparams_search": None} in cfg["defaults"]


@pytest.mark.parametrize("name", SEARCHES)
def test_every_search_composes_and_keeps_the_built_memory(name):
    _need_optuna()
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from mnemis.app.jobs import build_address
    from mnemis.settings import load_settings

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=quickstart", f"hparams_search={name}"],
                      return_hydra_config=True)
        base = compose(config_name="config", overrides=["experiment=quickstart"])
    assert cfg.hydra.sweeper._target_.endswith("OptunaSweeper")
    assert cfg.optimized_metric and "#" in cfg.optimized_metric
    params = OmegaConf.to_container(cfg.hydra.sweeper.params)
    assert params, f"{name}: no parameters to search"
    plain = OmegaConf.to_container(base, resolve=True)
    for key in params:  # every searched key exists, and none of them is a build key (the memory is built once)
        assert OmegaConf.select(base, key, default="<missing>") != "<missing>", key
    assert build_address(load_settings(plain)) == build_address(load_settings(OmegaConf.to_container(
        compose_with(name, params), resolve=True)))


def compose_with(name: str, params: dict) -> object:
    """The quickstart with each searched key at a value of its range other than the default's."""
    from hydra import compose, initialize_config_dir

    overrides = []
    for key, spec in params.items():
        inner = str(spec).split("(", 1)[1].rstrip(")")
        overrides.append(f"{key}={inner.split(',')[-1].strip()}")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=quickstart", *overrides])


def test_the_quickstart_search_runs_and_returns_the_best_trial(tmp_path, locomo_path):
    _need_optuna()
    shared = REPO.parent / "shared" / "data"
    cmd = [sys.executable, "-m", "mnemis.app.cli", "run", "-m", "experiment=quickstart",
           "hparams_search=quickstart_system1", "llm=schema_fake", "embedder=hashing", "reranker=cosine",
           "hydra.sweeper.n_trials=3", "methods=[mnemis]", f"paths.artifacts_dir={tmp_path}/artifacts",
           f"paths.cache_dir={tmp_path}/cache", f"paths.shared_data_dir={shared}",
           f"hydra.sweep.dir={tmp_path}/sweep"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    sweep = tmp_path / "sweep"
    trials = sorted(p for p in sweep.iterdir() if p.name.isdigit())
    assert len(trials) == 3
    mrr = [read_metric(t, "recall.json#mnemis/system1.overall.mrr") for t in trials]
    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert result["best_value"] == pytest.approx(max(mrr))
    assert set(result["best_params"]) == {"retrieval.system1.rrf_k", "retrieval.system1.weights.bm25",
                                          "retrieval.system1.query_normalize"}
    assert len(list((tmp_path / "artifacts").iterdir())) == 1  # one memory for every trial
    assert (sweep / "compare.md").is_file()  # the sweep-end comparison ran too
    assert "setup plugin" not in res.stdout + res.stderr  # optuna's alembic import stays quiet
