"""experiments/bench/heldout_ablations.py: the held-out slice is what its rule says, each variant is paper mode with
exactly its exits closed, and a small schema-fake run of two variants replays from its archive."""

from __future__ import annotations

import json
import subprocess

import pytest

from mnemis.testing.bench_replay import SELECT_CAP_CPU
from tests.helpers.bench import load_bench
from tests.helpers.compose import plain_config


@pytest.fixture(scope="module")
def ha():
    return load_bench("heldout_ablations")


def test_each_variant_is_paper_mode_with_its_exits_closed(ha):
    for name, overrides in ha.VARIANTS.items():
        cfg = plain_config([f"experiment={ha.EXPERIMENT}", "mode=paper", *overrides])
        assert cfg["fidelity"] == "paper" and cfg["dataset"]["slice"]["groups"] == ["conv-48"]
        first_pick = cfg["retrieval"]["system2"]["min_top_selections"]
        min_assign = cfg["hierarchy"]["min_assignments"]
        split = cfg["retrieval"]["system2"]["max_candidates_per_prompt"]
        assert (first_pick >= 1) == (name in ("s2_first_pick", "all_exits")), name
        assert (min_assign >= 1) == (name in ("hierarchy_min_assignments", "all_exits")), name
        assert (split is not None) == (name == "all_exits"), name


def test_the_heldout_slice_follows_its_rule(locomo):
    """conv-48 sessions 1-2: 50 turns, 20 category 1-4 questions with their evidence inside, all four categories;
    the rule's best span outside conv-26 (35-60 turns, up to three consecutive sessions)."""
    cats = ("multi-hop", "temporal", "open-domain", "single-hop")

    def span(group, a, b):
        eps = [e for e in locomo.episodes if e.group_id == group and a <= e.session <= b]
        ids = {e.id for e in eps}
        qs = [q for q in locomo.questions if q.group_id == group and q.category in cats
              and q.evidence and set(q.evidence) <= ids]
        return len(eps), qs

    best = None
    for group in locomo.groups:
        if group == "conv-26":
            continue
        sessions = sorted({e.session for e in locomo.episodes if e.group_id == group})
        for a in sessions:
            for b in (x for x in sessions if a <= x <= a + 2):
                n, qs = span(group, a, b)
                if 35 <= n <= 60 and len({q.category for q in qs}) == 4:
                    key = (len(qs) / n, group, a, b)
                    best = max(best or key, key)
    assert best[1:] == ("conv-48", 1, 2)
    n, qs = span("conv-48", 1, 2)
    assert (n, len(qs)) == (50, 20)


def test_a_small_run_of_two_variants_replays(ha, tmp_path, locomo_path, monkeypatch):
    out = tmp_path / "results" / "h.json"
    fake = ["llm=schema_fake", "embedder=hashing", "reranker=cosine", "dataset.slice.sessions=[1,1]",
            "dataset.slice.max_questions=2", "judge.longmemeval_format=reasoned",  # the fake writes schema JSON
            f"paths.cache_dir={tmp_path}/cache", f"paths.artifacts_dir={tmp_path}/art",
            f"paths.shared_data_dir={locomo_path.parent}"]
    rc = ha.main(["--variants", "paper,all_exits", "--runs-dir", str(tmp_path / "runs"), "--out", str(out), "--", *fake])
    assert rc == 0
    saved = json.loads(out.read_text())
    assert list(saved["variants"]) == ["paper", "all_exits"] and saved["cache_archive"]["llm"] > 0
    assert list(saved["against_paper"]) == ["all_exits_vs_paper"] and "--variants paper,all_exits" in saved["command"]
    # the CPU reply caps by default, kept with the overrides so the replay sends the same requests
    assert saved["overrides"][:2] == ["reply_budget=off", "ingest.max_tokens.extract_entities=320"]
    assert f"retrieval.system2.max_tokens={SELECT_CAP_CPU}" in saved["overrides"]
    for v in saved["variants"].values():
        assert v["status"] == "complete" and v["mnemis_vs_rag"]["questions"] >= 1 and v["system2"]["questions"] >= 1
    assert ha.main(["--replay", "--out", str(out)]) == 0
    # a re-summary of the run directories (a stopped run) keeps the caps too, so --seed-cache continues it alike
    again = tmp_path / "results" / "again.json"
    assert ha.main(["--summarize", "--variants", "paper,all_exits", "--runs-dir", str(tmp_path / "runs"),
                    "--out", str(again), "--", *fake]) == 0
    assert json.loads(again.read_text())["overrides"] == saved["overrides"]
    assert saved["host"]["cpu_features"] == json.loads(again.read_text())["host"]["cpu_features"]
    # a replay that stops on a request the archive does not hold says why and exits 1 (no traceback)
    def stops(*args, **kwargs):
        raise subprocess.CalledProcessError(1, ["mnemis", "run"])

    monkeypatch.setattr(ha.bench_replay, "run_mode", stops)
    assert ha.main(["--replay", "--out", str(out)]) == 1
