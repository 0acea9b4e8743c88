"""Merging shard run dirs reproduces the unsharded run's metrics; mixed configs and duplicates are refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from mnemis.eval.harness import finalize_run
from mnemis.eval.records import QuestionRecord, read_records, write_records
from mnemis.eval.run_dir import QUESTIONS_FILE
from mnemis.models.ledger import Ledger
from mnemis.app.merge_command import merge_command
from mnemis.scale.merge import MergeError, merge_runs, parse_merge_args
from mnemis.data.shard import shard_groups, shard_specs

CONFIG = {"command": "run", "methods": ["mnemis", "rag"], "seed": 0, "dataset": {"name": "longmemeval"},
          "llm": {"backend": {"model": "Qwen/Qwen3-8B"}}, "judge": {"failed": "wrong", "separate_categories": [],
                                                                     "bootstrap": {"n_boot": 200, "seed": 0}},
          "paths": {"artifacts_dir": "runs/artifacts"}, "shard": None}
CATS = ("single-session-user", "multi-session", "temporal-reasoning", "adversarial")
OPTS = {"separate": (), "n_boot": 200, "seed": 0}


def _records(groups: list[str]) -> list[QuestionRecord]:
    rng = random.Random(7)
    out = []
    for method in ("mnemis", "rag"):
        for k, g in enumerate(groups):
            lab = rng.random() < (0.6 if method == "mnemis" else 0.4)
            out.append(QuestionRecord(method=method, question_id=f"{g}:q0", group_id=g, category=CATS[k % 4],
                                      question="q?", gold="a", answer="a" if lab else "b",
                                      labels={"main": None if k % 17 == 5 else lab, "other": not lab if k % 3 else lab}))
    return out


def _run_dir(path: Path, records: list[QuestionRecord], shard: str | None, **config_changes) -> Path:
    path.mkdir(parents=True)
    cfg = json.loads(json.dumps(CONFIG))
    cfg.update(shard=shard, paths={"artifacts_dir": str(path / "art")}, **config_changes)
    (path / "config.json").write_text(json.dumps(cfg))
    write_records(path / QUESTIONS_FILE, records)
    groups = sorted({r.group_id for r in records})
    led = Ledger()
    led.record("extract_entities", calls=10 * len(groups), prompt_tokens=1000 * len(groups), cache_hits=len(groups))
    led.record("answer", calls=len(records), prompt_tokens=50 * len(records))
    (path / "hierarchy_metrics.json").write_text(json.dumps({g: _hierarchy(g) for g in groups}))
    (path / "recall.json").write_text(json.dumps(_recall(groups)))
    finalize_run(path, ledger=led, **OPTS)
    return path


def _hierarchy(g: str) -> dict[str, int]:
    return {"layers": 1 + int(g[1:4]) % 3, "categories": 2 + int(g[1:4]) % 5}


def _recall(groups: list[str]) -> dict:
    """Per-group recall values that differ between groups, so shards hold different means."""
    def cell(gs: list[str]) -> dict:
        direct = [1.0 if int(g[1:4]) % 3 == 0 else 0.0 for g in gs]
        reach = [1.0 if int(g[1:4]) % 2 == 0 else 0.25 for g in gs]
        return {"direct": sum(direct) / len(gs), "reachable": sum(reach) / len(gs), "n": len(gs),
                "skipped": sum(g.endswith("_abs") for g in gs)}

    odd = [g for g in groups if int(g[1:4]) % 2]
    return {"rag": {"overall": cell(groups), **({"odd": cell(odd)} if odd else {})}}


@pytest.fixture
def groups():
    return [f"q{k:03d}" + ("_abs" if k % 9 == 0 else "") for k in range(26)]


def test_merged_shards_equal_the_unsharded_run(tmp_path, groups):
    records = _records(groups)
    whole = _run_dir(tmp_path / "whole", records, None)
    shards = []
    for spec in shard_specs(3):
        i, n = map(int, spec.split("/"))
        keep = set(shard_groups(groups, i, n))
        shards.append(_run_dir(tmp_path / f"shard{i}", [r for r in records if r.group_id in keep], spec))
    merged = merge_runs(shards, tmp_path / "merged")
    expected = json.loads((whole / "metrics.json").read_text())
    assert json.loads((tmp_path / "merged" / "metrics.json").read_text()) == expected
    assert merged["mnemis"]["n_groups"] == len(groups)
    assert expected["mnemis"]["judges"]["main"]["raw"]["overall"]["ci"][0] is not None  # CIs compared too
    led = json.loads((tmp_path / "merged" / "ledger.json").read_text())
    assert led["stages"]["extract_entities"]["calls"] == 10 * len(groups)
    assert led["stages"]["extract_entities"]["cache_hits"] == len(groups)
    assert led["total"]["calls"] == 10 * len(groups) + len(records)
    hier = json.loads((tmp_path / "merged" / "hierarchy_metrics.json").read_text())
    assert hier == {g: _hierarchy(g) for g in groups}
    recall = json.loads((tmp_path / "merged" / "recall.json").read_text())["rag"]
    # by hand: 9 of the 26 groups (000, 003, ..., 024) have direct 1; 13 even groups reach 1, 13 odd 0.25
    assert recall["overall"] == pytest.approx({"direct": 9 / 26, "reachable": (13 + 13 * 0.25) / 26, "n": 26,
                                               "skipped": 3})
    assert recall["odd"] == pytest.approx({"direct": 4 / 13, "reachable": 0.25, "n": 13, "skipped": 1})
    shard_means = [json.loads((s / "recall.json").read_text())["rag"]["overall"]["direct"] for s in shards]
    assert sum(shard_means) / 3 != pytest.approx(9 / 26)  # an unweighted mean of the shards would be wrong
    report = (tmp_path / "merged" / "report.md").read_text()
    assert "26 questions in 26 groups" in report and "Cost per stage" in report


def test_mixed_configs_are_refused_naming_the_keys(tmp_path, groups):
    records = _records(groups)
    a = _run_dir(tmp_path / "a", [r for r in records if r.group_id in set(groups[:10])], "0/2")
    b = _run_dir(tmp_path / "b", [r for r in records if r.group_id not in set(groups[:10])], "1/2",
                 llm={"backend": {"model": "Qwen/Qwen3-32B"}}, seed=1)
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], tmp_path / "out")
    msg = str(err.value)
    assert "llm.backend.model" in msg and "Qwen3-32B" in msg and "seed" in msg
    assert "paths" not in msg and "shard" not in msg  # keys shards may differ in are ignored
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_duplicate_groups_and_bad_inputs_are_refused(tmp_path, groups):
    records = _records(groups)
    a = _run_dir(tmp_path / "a", [r for r in records if r.group_id in set(groups[:14])], "0/2")
    b = _run_dir(tmp_path / "b", [r for r in records if r.group_id in set(groups[10:])], "1/2")
    with pytest.raises(MergeError, match="appears in two shards"):
        merge_runs([a, b], tmp_path / "out")
    with pytest.raises(MergeError, match="listed twice"):
        merge_runs([a, a], tmp_path / "out")
    with pytest.raises(MergeError, match="not run directories"):
        merge_runs([a, tmp_path / "nope"], tmp_path / "out")
    with pytest.raises(MergeError, match="no run dirs"):
        merge_runs([], tmp_path / "out")
    (tmp_path / "c").mkdir()
    with pytest.raises(MergeError, match="config.json"):
        merge_runs([a, tmp_path / "c"], tmp_path / "out")


def test_merge_command_line(tmp_path, groups, capsys):
    records = _records(groups)
    dirs = []
    for spec in shard_specs(2):
        i, n = map(int, spec.split("/"))
        keep = set(shard_groups(groups, i, n))
        dirs.append(_run_dir(tmp_path / "sweep" / f"shard_{i}", [r for r in records if r.group_id in keep], spec))
    (tmp_path / "sweep" / "multirun.yaml").write_text("x")  # sweep-dir litter is skipped by globs
    assert parse_merge_args([f"runs=[{dirs[0]},{dirs[1]}]", "out=o"]) == ([str(dirs[0]), str(dirs[1])], "o")
    metrics = merge_command([f"runs=[{tmp_path}/sweep/*]", f"out={tmp_path}/m"])
    assert metrics["rag"]["n_groups"] == len(groups) and "report.md" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="usage"):
        merge_command(["runs=[a]"])
    with pytest.raises(SystemExit, match="appears in two shards"):
        merge_command([f"runs=[{dirs[0]},{tmp_path}/m]", f"out={tmp_path}/m2"])


def _split(tmp_path: Path, groups: list[str], n: int, *, manifest: bool = True) -> list[Path]:
    """``n`` shard run dirs of ``groups``, each with its ``shard.json`` (as the main job writes it)."""
    from mnemis.scale.merge import write_shard_manifest
    from mnemis.types import Question

    records = _records(groups)
    dirs = []
    for i in range(n):
        keep = shard_groups(groups, i, n)
        d = _run_dir(tmp_path / f"s{i}", [r for r in records if r.group_id in set(keep)], f"{i}/{n}")
        if manifest:
            qs = [Question(id=f"{g}:q0", group_id=g, question="q?", answer="a", category="x") for g in keep]
            write_shard_manifest(d, f"{i}/{n}", keep, qs, ["mnemis", "rag"], [0])
        dirs.append(d)
    return dirs


def test_a_missing_shard_is_refused_naming_it(tmp_path, groups):
    dirs = _split(tmp_path, groups, 4)
    with pytest.raises(MergeError, match=r"missing shard\(s\) 2/4 of the 4-way split"):
        merge_runs([dirs[0], dirs[1], dirs[3]], tmp_path / "out")
    other = _split(tmp_path / "three", [f"r{k:03d}" for k in range(6)], 3)
    with pytest.raises(MergeError, match="shards of different splits"):
        merge_runs([dirs[0], dirs[1], dirs[2], other[0]], tmp_path / "out")
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_an_unfinished_shard_is_refused(tmp_path, groups):
    dirs = _split(tmp_path, groups, 2)
    (dirs[1] / "metrics.json").unlink()  # killed before its last method finished
    with pytest.raises(MergeError, match=r"shard 1/2 \(.*s1\) did not finish: no metrics.json"):
        merge_runs(dirs, tmp_path / "out")


def test_a_method_missing_for_some_questions_is_refused_naming_shard_method_and_group(tmp_path, groups):
    dirs = _split(tmp_path, groups, 2)
    rows = [r for r in read_records(dirs[1] / QUESTIONS_FILE)
            if not (r.method == "rag" and r.group_id == shard_groups(groups, 1, 2)[3])]
    write_records(dirs[1] / QUESTIONS_FILE, rows)
    missing = shard_groups(groups, 1, 2)[3]
    with pytest.raises(MergeError, match=rf"shard 1/2 .*method rag \(seed 0\) has no answer for 1 question\(s\) "
                                         rf"in 1 group\(s\), first group '{missing}'"):
        merge_runs(dirs, tmp_path / "out")
    # a shard stopped after its first method (no manifest: its config's methods stand for it)
    plain = _split(tmp_path / "plain", groups, 2, manifest=False)
    write_records(plain[0] / QUESTIONS_FILE, [r for r in read_records(plain[0] / QUESTIONS_FILE)
                                              if r.method == "mnemis"])
    with pytest.raises(MergeError, match=r"shard 0/2 .*method rag \(seed 0\) has no answer"):
        merge_runs(plain, tmp_path / "out2")


def test_a_group_outside_the_split_or_the_manifest_is_refused(tmp_path, groups):
    from mnemis.scale.merge import write_shard_manifest
    from mnemis.types import Question

    dirs = _split(tmp_path, groups, 2)
    moved = shard_groups(groups, 1, 2)[0]  # shard 0 claims a group of shard 1 (different data loaded)
    keep0 = shard_groups(groups, 0, 2) + [moved]
    keep1 = [g for g in shard_groups(groups, 1, 2) if g != moved]
    records = _records(groups)
    for d, keep, spec in ((dirs[0], keep0, "0/2"), (dirs[1], keep1, "1/2")):
        write_records(d / QUESTIONS_FILE, [r for r in records if r.group_id in set(keep)])
        write_shard_manifest(d, spec, keep, [Question(id=f"{g}:q0", group_id=g, question="q?", answer="a", category="x")
                                             for g in keep], ["mnemis", "rag"], [0])
    with pytest.raises(MergeError, match=rf"group '{moved}' is in shard 0/2 .* puts it in shard 1/2"):
        merge_runs(dirs, tmp_path / "out")
    dirs = _split(tmp_path / "b", groups, 2)
    extra = _records(["q999"])[0]  # a row the shard's manifest does not list
    write_records(dirs[0] / QUESTIONS_FILE, [*read_records(dirs[0] / QUESTIONS_FILE), extra])
    with pytest.raises(MergeError, match="group 'q999' question 'q999:q0' .* not one of the shard's questions"):
        merge_runs(dirs, tmp_path / "out")


def test_merge_keeps_roles_leniency_and_unions_the_cache_archives(tmp_path, groups):
    import gzip

    from mnemis.models.cache_archive import export_archive, import_archive
    from mnemis.models.cache import CachedReply, ResponseCache
    from mnemis.eval.run_dir import ARCHIVE_FILE

    dirs = _split(tmp_path, groups, 2)
    roles = {"roles": {"answer": "Qwen/Qwen3-8B"}, "headline_judge": "other",
             "judges": [{"name": "main", "model": "j", "criterion": "strict", "slot": "llm"}]}
    leniency = {"judges": {"main": {"wrong_specific": {"rate": 0.125, "judged": 40},
                                    "wrong_vague": {"rate": 0.5, "judged": 40}}}}
    for k, d in enumerate(dirs):
        (d / "roles.json").write_text(json.dumps(roles))
        (d / "leniency.json").write_text(json.dumps(leniency))
        cache = ResponseCache(tmp_path / f"cache{k}" / "llm")
        cache.put_many([(f"key{k}", "m", "extract", CachedReply(f"reply{k}", 3, 1, None, "stop", 0)),
                        ("shared", "m", "extract", CachedReply("same", 3, 1, None, "stop", 0))])
        cache.close()
        export_archive(tmp_path / f"cache{k}", d / ARCHIVE_FILE)
    metrics = merge_runs(dirs, tmp_path / "out")
    out = tmp_path / "out"
    assert json.loads((out / "roles.json").read_text()) == roles
    assert json.loads((out / "leniency.json").read_text()) == leniency
    assert metrics["rag"]["headline_judge"] == "other"  # the shards' headline judge, as the unsharded run
    report = (out / "report.md").read_text()
    assert "## Models by role" in report and "| answer | Qwen/Qwen3-8B |" in report
    assert "## Judge leniency" in report and "| main | – | 12.5 | 50.0 | 80 |" in report
    lines = gzip.open(out / ARCHIVE_FILE, "rt").read().splitlines()
    assert [json.loads(x)["key"] for x in lines] == ["key0", "key1", "shared"]
    assert import_archive(out / ARCHIVE_FILE, tmp_path / "replay") == {"llm": 3, "rerank": 0}
    shards = json.loads((out / "shards.json").read_text())
    assert shards["cache_archive"]["conflicts"] == 0 and shards["coverage"]["n_shards"] == 2


def test_archives_with_embeddings_token_counts_and_identities_merge(tmp_path):
    """Every kind a run's archive carries: identity rows (keyed by cache and node) kept once per node."""
    import gzip

    from mnemis.scale.merge import merge_archives

    ident = {"kind": "identity", "cache": "embed", "node": "{minilm}", "identity": "minilm@abc", "dim": 384}
    rows = [[{"kind": "llm", "key": "a", "text": "x"}, {"kind": "tokens", "key": "t1", "n": 5}, ident],
            [{"kind": "embed", "key": "e1", "n": 1, "dim": 2, "vecs": "AAAA"}, ident,
             {**ident, "cache": "rerank", "identity": "smollm2@def"}]]
    paths = []
    for k, shard in enumerate(rows):
        paths.append(tmp_path / f"a{k}.jsonl.gz")
        with gzip.open(paths[-1], "wt") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in shard))
    got = merge_archives(paths, tmp_path / "out.jsonl.gz")
    assert got["entries"] == {"llm": 1, "tokens": 1, "identity": 2, "embed": 1} and got["conflicts"] == 0


def test_the_sweep_end_callback_merges_the_shards_and_stops_on_a_gap(tmp_path, groups):
    from omegaconf import OmegaConf

    from mnemis.app.sweep_end import MergeCallback

    sweep = tmp_path / "sweep"
    dirs = _split(sweep, groups, 3)
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}})
    MergeCallback().on_multirun_end(cfg)
    merged = json.loads((sweep / "merged" / "metrics.json").read_text())
    assert merged["rag"]["n_groups"] == len(groups)
    # by hand afterwards: the sweep glob skips the merge's own output dir
    assert parse_merge_args([f"runs=[{sweep}/*]", "out=o"])[0] == [str(d) for d in dirs]
    (dirs[2] / "metrics.json").unlink()  # a shard that did not finish: the sweep stops, naming it
    with pytest.raises(MergeError, match=r"shard 2/3 .* did not finish"):
        MergeCallback().on_multirun_end(cfg)
