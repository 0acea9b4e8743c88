"""Paper-table experiments: every overlay and route composes with the README's override combos, every
``_target_`` and retrieval section binds to its consumer, sweeps keep the build hash, and
``experiments/paper/collect.py`` fills the paper tables from synthetic run dirs.

No model is loaded: targets are imported and their signatures bound (as in models/test_configs.py).
"""

from __future__ import annotations

import importlib.util
import inspect
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
from tests.helpers.config_targets import bind_targets

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "experiments" / "paper"
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("paper_*.yaml"))
ROUTES = sorted(p.stem for p in (CONF_DIR / "route").glob("*.yaml"))
# `route=` once conf/config.yaml lists `- route: null` in its defaults; `+route=` (append) before that.
_DEFAULTS = OmegaConf.load(CONF_DIR / "config.yaml").defaults
R = "route=" if any(isinstance(d, dict) and any(str(k).split()[-1] == "route" for k in d) for d in
                    OmegaConf.to_container(_DEFAULTS)) else "+route="


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


collect = _load("paper_collect", PAPER / "collect.py")


def _cfg(overrides: list[str]) -> dict[str, Any]:
    return plain_config(overrides)  # composed once per session: the combos recur in several tests


# ------------------------------------------------------------------------------------------ compose
def test_experiment_overlays_override_primary_keys():
    """An overlay's top-level keys (methods, run_name) must beat conf/config.yaml's own values."""
    cfg = _cfg(["experiment=paper_locomo_baselines"])
    assert (cfg["methods"], cfg["run_name"]) == (["rag", "full_context"], "paper_locomo_baselines"), (
        "conf/config.yaml merges its own keys after the experiment: move `- _self_` to the top of its defaults")


# (overrides, expected: methods, route (as collect.py derives it), k, dataset, embedder, reranker)
COMBOS: list[tuple[list[str], dict[str, Any]]] = [
    (["experiment=paper_locomo_k10"], {"methods": ["mnemis"], "route": "mnemis", "k": 10}),
    (["experiment=paper_locomo_k30"], {"methods": ["mnemis"], "route": "mnemis", "k": 30}),
    (["experiment=paper_locomo_baselines"], {"methods": ["rag", "full_context"], "k": 10}),
    (["experiment=paper_locomo_mem0"], {"methods": ["mem0", "mem0g"]}),
    (["experiment=paper_locomo_mem0", "dataset=longmemeval_s", "judge=longmemeval"],
     {"methods": ["mem0", "mem0g"], "dataset": "longmemeval"}),
    (["experiment=paper_lme_s"], {"methods": ["mnemis", "rag", "full_context"], "route": "mnemis", "k": 10,
                                       "dataset": "longmemeval"}),
    (["experiment=paper_lme_s", "methods=[mnemis]", "llm=openai_compat", "llm.backend.model=gpt-4.1-mini",
      "llm.backend.base_url=https://api.openai.com/v1", "llm.backend.extra_body=null"],
     {"methods": ["mnemis"], "dataset": "longmemeval"}),
    *[(["experiment=paper_locomo_k10", R + r], {"route": r, "k": 10}) for r in
      ("s1_rag", "s1_graph", "s1_rag_graph", "s1_reranked", "s2_only", "mnemis")],
    *[(["experiment=paper_locomo_k10", R + r, f"retrieval.k={k}"], {"route": r, "k": k}) for r in
      ("s1_rag", "s1_graph", "s1_rag_graph", "s2_only", "mnemis") for k in (5, 50)],
    (["experiment=paper_locomo_k10", "reranker=qwen3_0_6b"],
     {"route": "mnemis", "reranker": "Qwen/Qwen3-Reranker-0.6B"}),
    (["experiment=paper_locomo_k10", "reranker=bge_reranker_v2_m3"],
     {"route": "mnemis", "reranker": "BAAI/bge-reranker-v2-m3"}),
    *[(["experiment=paper_locomo_k10", R + "s1_rag", f"embedder={e}"], {"methods": ["rag"], "route": "s1_rag",
                                                                           "embedder": e})
      for e in ("minilm", "bge_m3", "qwen3_0_6b_128", "embeddinggemma_300m")],
]


@pytest.mark.parametrize("overrides,expect", COMBOS, ids=lambda x: " ".join(x) if isinstance(x, list) else "")
def test_combo_composes_with_the_intended_setting(overrides, expect):
    cfg = _cfg(overrides)
    assert cfg["methods"] == expect.get("methods", cfg["methods"])
    assert cfg["dataset"]["name"] == expect.get("dataset", "locomo")
    assert cfg["judge"]["separate_categories"] == (["adversarial"] if cfg["dataset"]["name"] == "locomo" else [])
    r = cfg["retrieval"]
    if "k" in expect:
        assert r["k"] == r["fusion"]["k"] == expect["k"]
    if "route" in expect:
        method = cfg["methods"][0]
        assert collect.describe(cfg, method)["route"] == expect["route"]
        assert r["name"] == expect["route"]
    emb_file = CONF_DIR / "embedder" / f"{expect.get('embedder', 'qwen3_0_6b_128')}.yaml"
    emb = OmegaConf.to_container(OmegaConf.load(emb_file))
    assert cfg["embedder"]["model"] == emb["model"]
    assert cfg["reranker"]["model"] == expect.get("reranker", "Qwen/Qwen3-Reranker-8B")
    if "llm=openai_compat" not in overrides:
        assert cfg["llm"]["backend"]["model"] == "Qwen/Qwen3-8B"
    assert cfg["run_name"] == next(o.split("=")[1] for o in overrides if o.startswith("experiment="))


def readme_commands() -> list[list[str]]:
    """Every ``mnemis run`` command of the README, sweeps (``-m``, ``a,b``) expanded to their jobs."""
    import itertools
    import shlex

    jobs = []
    for line in (PAPER / "README.md").read_text().splitlines():
        if not line.startswith("mnemis run "):
            continue
        args = [a for a in shlex.split(line.split("#")[0])[2:] if a != "-m"]
        args = [R + a.split("=", 1)[1] if a.startswith("route=") else a for a in args]
        choices = [[f"{a.split('=', 1)[0]}={v}" for v in a.split("=", 1)[1].split(",")]
                   if "," in a and "[" not in a else [a] for a in args]
        jobs += [list(c) for c in itertools.product(*choices)]
    return jobs


def test_readme_commands_compose():
    jobs = readme_commands()
    assert len(jobs) == 4 + 2 + 6 + 20 + 3 + 4 + 25  # tables 1, 2, 4, 9, 5, 6, ablations (24 overlays + mode=tuned)
    for overrides in jobs:
        cfg = _cfg(overrides)
        exp = next(o.split("=")[1] for o in overrides if o.startswith("experiment="))
        assert cfg["run_name"] == next((o.split("=")[1] for o in overrides if o.startswith("run_name=")), exp)
        route = next((o.split("=")[1] for o in overrides if "route=" in o), None)
        if route is not None:
            assert collect.describe(cfg, cfg["methods"][0])["route"] == route
        for o in overrides:
            key, value = o.lstrip("+").split("=", 1)
            if key.startswith("retrieval.k"):
                assert cfg["retrieval"]["k"] == int(value)


def test_every_paper_overlay_and_route_is_covered():
    assert set(EXPERIMENTS) == {"paper_locomo_k10", "paper_locomo_k30", "paper_locomo_baselines",
                                "paper_locomo_mem0", "paper_lme_s"}
    assert set(ROUTES) == {"s1_rag", "s1_graph", "s1_rag_graph", "s1_reranked", "s2_only", "mnemis"}
    for name in [*EXPERIMENTS, *ROUTES]:
        group = "experiment" if name in EXPERIMENTS else "route"
        assert (CONF_DIR / group / f"{name}.yaml").read_text().startswith("# @package _global_\n")
    readme = (PAPER / "README.md").read_text()
    for e in EXPERIMENTS:
        assert f"experiment={e}" in readme
    for r in ROUTES:
        assert r in readme


def _targets(node: Any, where: str = "cfg"):
    if isinstance(node, dict):
        if "_target_" in node:
            yield where, node
            return
        for k, v in node.items():
            yield from _targets(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _targets(v, f"{where}[{i}]")


def _bind(fn, *args: Any, **kwargs: Any) -> None:
    sig = inspect.signature(fn)
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise AssertionError(f"{fn.__qualname__}{sig} does not accept {sorted(kwargs)}: {exc}") from exc


@pytest.mark.parametrize("overrides", [c[0] for c in COMBOS], ids=lambda o: " ".join(o))
def test_targets_and_retrieval_sections_bind(overrides):
    from mnemis.baselines.rag import rag_contexts
    from mnemis.retrieve.context import render_context
    from mnemis.retrieve.fuse import Fuser
    from mnemis.retrieve.system1 import System1
    from mnemis.retrieve.system2 import System2Config

    cfg = _cfg(overrides)
    checked = sum(bind_targets(node, where) for where, node in _targets(cfg))
    assert checked >= 5  # llm (+ backend), embedder, reranker, ingest, hierarchy
    r = cfg["retrieval"]
    s1 = {k: v for k, v in r["system1"].items() if k != "enabled"}
    _bind(System1, object(), object(), **s1)
    _bind(Fuser, object(), object(), **r["fusion"])
    _bind(render_context, object(), [], **r["context"])
    System2Config(**{k: v for k, v in r["system2"].items() if k != "enabled"})
    rag_kw = {k: v for k, v in s1.items() if k not in ("routes", "k")}
    _bind(rag_contexts, object(), object(), [], k=r["k"], **rag_kw)
    for m in ("mem0", "mem0g"):
        assert cfg[m]["name"] == m


def test_retrieval_sweeps_reuse_the_build_and_embedder_sweeps_do_not():
    from mnemis.app.jobs import build_address
    from mnemis.settings import load_settings

    base = build_address(load_settings(_cfg(["experiment=paper_locomo_k10"])))
    same = [["experiment=paper_locomo_k30"], ["experiment=paper_locomo_baselines"], ["experiment=paper_locomo_mem0"],
            ["experiment=paper_locomo_k10", "reranker=qwen3_0_6b"],
            ["experiment=paper_locomo_k10", "retrieval.k=50"],
            *[["experiment=paper_locomo_k10", R + r] for r in ROUTES]]
    for ov in same:
        assert build_address(load_settings(_cfg(ov))) == base, ov
    other = {build_address(load_settings(_cfg(["experiment=paper_locomo_k10", R + "s1_rag", f"embedder={e}"])))
             for e in ("minilm", "bge_m3", "embeddinggemma_300m")}
    assert len(other) == 3 and base not in other
    assert build_address(load_settings(_cfg(["experiment=paper_lme_s"]))) != base


def test_route_files_name_the_setting_collect_derives():
    for r in ROUTES:
        cfg = _cfg(["experiment=paper_locomo_k10", R + r])
        assert collect.describe(cfg, cfg["methods"][0])["route"] == r == cfg["retrieval"]["name"]


def test_fallback_flag_is_the_system2_flag():
    from mnemis.retrieve import system2

    assert collect.FALLBACK_FLAG == system2.FALLBACK_FLAG == "s2_fallback"


# ------------------------------------------------------------------------------------------ collect
CATS = collect.LOCOMO_CATS


def _records(method: str, correct: dict[str, int], n: int = 10, cats: tuple[str, ...] = CATS,
             fallbacks: int = 0) -> list[QuestionRecord]:
    """``n`` questions per category over two groups, the first ``correct[c]`` right; plus 4 adversarial."""
    out = []
    for c in cats:
        for i in range(n):
            flags = [collect.FALLBACK_FLAG] if len(out) < fallbacks else []
            out.append(QuestionRecord(method=method, question_id=f"{c}:{i}", group_id=f"g{i % 2}", category=c,
                                      question="q?", gold="a", answer="a", labels={"main": i < correct[c]},
                                      flags=flags))
    if cats == CATS:
        out += [QuestionRecord(method=method, question_id=f"adv:{i}", group_id="g0", category="adversarial",
                               question="q?", gold="a", labels={"main": False}) for i in range(4)]
    return out


def _run_dir(path: Path, overrides: list[str], correct: dict[str, dict[str, int]], mtime: float, **kw) -> Path:
    """A run dir as the main job leaves it: config.json, questions.jsonl, metrics.json."""
    path.mkdir(parents=True)
    cfg = _cfg(overrides)
    (path / "config.json").write_text(json.dumps(cfg))
    recs = [r for method in cfg["methods"] for r in _records(method, correct[method], **kw)]
    write_records(path / QUESTIONS_FILE, recs)
    dump_json(path / "metrics.json", metrics_by_method(recs, n_boot=200))
    os.utime(path / "config.json", (mtime, mtime))
    return path


def _acc(**c: int) -> dict[str, int]:
    return dict(zip(CATS, (c["mh"], c["t"], c["od"], c["sh"])))


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
    """A fake multirun dir for Table 4 (one job per route) plus a reranker job and a stale rerun."""
    root = tmp_path / "multirun"
    for i, r in enumerate(ROUTES):
        method = "rag" if r == "s1_rag" else "mnemis"
        _run_dir(root / str(i), ["experiment=paper_locomo_k10", R + r], {method: _acc(mh=i, t=i + 1, od=2, sh=3)},
                 1000.0 + i, fallbacks=5 if r == "s2_only" else 0)
    _run_dir(root / "stale", ["experiment=paper_locomo_k10", R + "mnemis"], {"mnemis": _acc(mh=0, t=0, od=0, sh=0)},
             10.0)
    _run_dir(root / "rr06", ["experiment=paper_locomo_k10", "reranker=qwen3_0_6b"],
             {"mnemis": _acc(mh=9, t=9, od=9, sh=9)}, 2000.0)
    _run_dir(root / "bge", ["experiment=paper_locomo_k10", "reranker=bge_reranker_v2_m3"],
             {"mnemis": _acc(mh=8, t=8, od=8, sh=8)}, 2001.0)
    return root


def test_collect_table4_from_a_multirun_dir(sweep: Path):
    runs = collect.find_runs([sweep])
    assert len(runs) == len(ROUTES) + 3
    result = collect.collect(collect.TABLES["table4"], collect.load_candidates(runs))
    rows = {r["label"]: r for r in result["rows"]}
    assert len(rows) == 6
    for i, r in enumerate(ROUTES):
        row = rows[collect.ROUTE_LABELS[r]]
        assert row["run"] == sweep / str(i), r  # the stale rerun and the other-reranker runs do not fit
        o = row["ours"]
        assert [o[c] for c in CATS] == pytest.approx([i / 10, (i + 1) / 10, 0.2, 0.3])
        assert o["overall"] == pytest.approx((i + i + 1 + 2 + 3) / 40) and o["n"] == 40
        assert row["fallbacks"] == (5 if r == "s2_only" else 0)
    assert rows["System-1 + System-2"]["others"] == [sweep / "stale"]
    assert rows["System-1 RAG"]["paper"] == (64.9, 76.6, 67.7, 76.5, 73.8)
    md = collect.to_markdown(result, sweep)
    assert ROUTES.index("s2_only") == 5
    line = next(x for x in md.splitlines() if x.startswith("| System-2 Only |"))
    assert line.startswith("| System-2 Only | 50.0 (88.1) | 60.0 (78.5) | 20.0 (79.5) | 30.0 (92.0) | "
                           "40.0 (87.7) | -47.7 | ")
    assert line.endswith(" | no | 40 | 5 | 5 |")
    assert "Qwen/Qwen3-8B (paper: GPT-4.1-mini)" in md and "also fit: " in md


def test_collect_table5_and_table1_pick_the_right_runs(sweep: Path):
    cands = collect.load_candidates(collect.find_runs([sweep]))
    t5 = {r["label"]: r for r in collect.collect(collect.TABLES["table5"], cands)["rows"]}
    assert t5["Qwen3-Reranker-0.6B"]["run"] == sweep / "rr06"
    assert t5["Qwen3-Reranker-0.6B"]["ours"]["overall"] == pytest.approx(0.9)
    assert t5["Qwen3-Reranker-8B"]["run"] == sweep / str(ROUTES.index("mnemis"))
    assert t5["BGE-Reranker-V2-M3"]["run"] == sweep / "bge"
    assert t5["BGE-Reranker-V2-M3"]["ours"]["overall"] == pytest.approx(0.8)
    t1 = {r["label"]: r for r in collect.collect(collect.TABLES["table1"], cands)["rows"]}
    assert t1["RAG"]["run"] == sweep / str(ROUTES.index("s1_rag"))
    assert t1["Mnemis (k=10)"]["run"] == sweep / str(ROUTES.index("mnemis"))
    assert t1["Mnemis (k=30)"]["run"] is None and t1["Full Context"]["run"] is None
    md = collect.to_markdown({**collect.collect(collect.TABLES["table5"], cands)})
    assert "| BGE-Reranker-V2-M3 | 80.0 (90.1) | 80.0 (90.0) | 80.0 (77.1) | 80.0 (96.4) | 80.0 (92.7) |" in md


def test_collect_table2_side_by_side_run_and_cli(tmp_path: Path):
    cats = collect.LME_CATS
    per = {"mnemis": dict(zip(cats, (10, 9, 10, 9, 9, 10))), "rag": dict(zip(cats, (8, 5, 9, 7, 8, 9))),
           "full_context": dict(zip(cats, (9, 5, 2, 6, 8, 10)))}
    run = _run_dir(tmp_path / "runs" / "lme", ["experiment=paper_lme_s"], per, 100.0, cats=cats)
    _run_dir(tmp_path / "runs" / "loc", ["experiment=paper_locomo_k10"], {"mnemis": _acc(mh=10, t=10, od=10, sh=10)},
             200.0)  # LoCoMo: never fills a LongMemEval row
    out = tmp_path / "table2.md"
    assert collect.main(["table2", str(tmp_path / "runs"), "--out", str(out)]) == 0
    md = out.read_text()
    rows = {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ")}
    assert rows["Mnemis"].startswith("| Mnemis | 100.0 (98.6) | 90.0 (86.5) | 100.0 (100.0) | 90.0 (86.5) | "
                                     "90.0 (93.6) | 100.0 (100.0) | 95.0 (91.6) | +3.4 | ")
    assert rows["RAG"].startswith("| RAG | 80.0 (82.9) | 50.0 (54.9) | 90.0 (86.7) | 70.0 (67.7) | 80.0 (80.8) | "
                                  "90.0 (94.6) | 76.7 (72.6) | +4.1 | ")
    assert rows["Full Context"].split(" | ")[7] == "66.7 (65.6)"
    assert rows["Mem0"].split(" | ")[7] == "– (80.8)"
    assert all(str(run.relative_to(tmp_path / "runs")) in rows[k] for k in ("Mnemis", "RAG", "Full Context"))
    assert collect.main(["table2", str(tmp_path / "nothing")]) == 1


def test_collect_recomputes_metrics_from_records_and_respects_the_judge(tmp_path: Path):
    run = _run_dir(tmp_path / "r", ["experiment=paper_locomo_k10"], {"mnemis": _acc(mh=5, t=5, od=5, sh=5)}, 1.0)
    (run / "metrics.json").unlink()
    cands = collect.load_candidates(collect.find_runs([tmp_path]))
    row = collect.collect(collect.TABLES["table4"], cands)["rows"][-1]
    assert row["label"] == "System-1 + System-2" and row["ours"]["overall"] == pytest.approx(0.5)
    none = collect.collect(collect.TABLES["table4"], cands, judge="gpt41")["rows"][-1]
    assert none["run"] is None
