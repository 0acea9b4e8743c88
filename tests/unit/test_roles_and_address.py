"""Model roles, the startup check, composition of every paper experiment, the build address, and the
``seeds=[...]`` option (no model is loaded: schema-fake LLMs and the hashing embedder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mnemis.app.jobs as jobs
import mnemis.prompts.fingerprint as fp
from mnemis.app.jobs import Models, build_address, build_view, run_command
from mnemis.config import compose, to_plain
from mnemis.roles import RoleError, check_roles, judge_specs, roles_summary, run_seeds
from mnemis.settings import AnswerSettings, load_settings

PAPER_EXPERIMENTS = ["paper_locomo_k10", "paper_locomo_k30", "paper_locomo_baselines", "paper_locomo_mem0",
                     "paper_lme_s"]
GPT = ["+llm@judge_llms.paper=openai_compat", "judge_llms.paper.backend.model=gpt-4.1-mini",
       "judge_llms.paper.backend.base_url=https://api.openai.com/v1", "judge_llms.paper.backend.extra_body=null"]


def _plain(overrides, command="run"):
    """The run settings of ``overrides`` (as ``mnemis <command>`` reads them)."""
    plain = to_plain(compose(overrides))
    plain["command"] = command
    return load_settings(plain)


# ------------------------------------------------------------------------------------ composition
@pytest.mark.parametrize("exp", PAPER_EXPERIMENTS)
def test_paper_experiments_compose_with_paper_answering_and_judging(exp):
    plain = _plain([f"experiment={exp}", *GPT])
    check_roles(plain)
    assert plain.fidelity == "paper" and plain.answer.prompt == "paper"
    assert plain.answer.prompt_by_method == {"mem0": "mem0", "mem0g": "mem0"}
    roles = roles_summary(plain)
    judges = roles["judges"]
    if exp == "paper_lme_s":
        assert [j["name"] for j in judges] == ["official"]
    else:
        assert [(j["name"], j["criterion"]) for j in judges] == [("generous", "generous"), ("strict", "strict")]
    assert roles["headline_judge"] == judges[0]["name"]
    assert all(j["model"] == "OpenAIBackend:gpt-4.1-mini" and not j["self_judged"] for j in judges)
    assert roles["roles"]["answer_llm"] == roles["roles"]["selector_llm"] == "VLLMBackend:Qwen/Qwen3-8B (= llm)"


def test_quickstart_keeps_the_tuned_answering_and_says_it_is_self_judged():
    plain = _plain(["experiment=quickstart"])
    check_roles(plain)
    assert plain.fidelity == "tuned" and plain.answer.prompt == "terse"
    roles = roles_summary(plain)
    assert roles["judges"] == [{"name": "main", "llm": None, "criterion": "strict", "lme_format": "reasoned",
                                "model": "VLLMBackend:smollm2-135m", "slot": "llm", "self_judged": True}]


@pytest.mark.parametrize("exp", PAPER_EXPERIMENTS)
def test_paper_experiment_without_a_judge_fails_before_any_model_loads(exp, tmp_path):
    cfg = compose([f"experiment={exp}", f"paths.artifacts_dir={tmp_path}/a", f"paths.cache_dir={tmp_path}/c"])
    before = dict(jobs._MODELS)
    with pytest.raises(RoleError, match=r"judge_llms\.paper, which is empty\. The paper judged every row with GPT-4\.1-mini"):
        run_command(cfg, tmp_path / "out")
    assert jobs._MODELS == before and not (tmp_path / "a").exists()


def test_startup_check_names_the_key():
    with pytest.raises(RoleError, match=r"judge_llms\.gpt"):
        check_roles(_plain(["judge.judges=[main,gpt]"]))
    with pytest.raises(RoleError, match=r"criterion='kind'"):
        check_roles(_plain(["judge.judges=[{name: a, llm: null, criterion: kind}]"]))
    with pytest.raises(RoleError, match="duplicate judge name"):
        check_roles(_plain(["judge.judges=[main,main]"]))
    with pytest.raises(RoleError, match=r"answer\.prompt_by_method\.rag='long'"):
        check_roles(_plain(["methods=[rag]", "+answer.prompt_by_method.rag=long"]))


def test_judging_with_the_model_under_test_is_explicit_and_reported():
    plain = _plain(["experiment=paper_locomo_k10", "judge_llms.paper=${llm}"])
    check_roles(plain)
    assert all(j["self_judged"] for j in roles_summary(plain)["judges"])
    other_answerer = _plain(["experiment=paper_locomo_k10", "judge_llms.paper=${llm}", "+llm@answer_llm=qwen3_32b_vllm"])
    assert all(j["self_judged"] for j in roles_summary(other_answerer)["judges"])  # still the build model


def test_roles_share_one_engine_when_configs_match():
    cfg = compose(["experiment=paper_locomo_k10", "llm=schema_fake", "judge_llms.paper=${llm}",
                   "+llm@answer_llm=schema_fake", "answer_llm.max_retries=1"])
    settings = load_settings(to_plain(cfg))
    models = Models(settings.models())
    judges = models.judges(judge_specs(settings.judge))
    assert judges["generous"].llm is models.llm and judges["strict"].llm is models.llm
    assert judges["generous"].criterion == "generous" and judges["strict"].criterion == "strict"
    assert models.selector_llm is models.llm and models.answer_llm is not models.llm
    models.answer_llm.ledger.record("answer", calls=2)
    models.llm.ledger.record("judge:generous", calls=3)
    stages = models.ledger().to_dict()["stages"]
    assert stages["answer"]["calls"] == 2 and stages["judge:generous"]["calls"] == 3


# ------------------------------------------------------------------------------------ build address
def test_roles_answering_and_judging_are_not_build_keys_but_the_build_llm_is():
    base = build_address(_plain(["experiment=paper_locomo_k10"]))
    for ov in (["+llm@answer_llm=qwen3_32b_vllm"], ["+llm@selector_llm=qwen3_32b_vllm"], ["answer.prompt=terse"],
               GPT, ["seeds=[0,1]"], ["paths.cache_dir=elsewhere/cache"], ["ingest.show_progress=true"]):
        assert build_address(_plain(["experiment=paper_locomo_k10", *ov])) == base, ov
    assert build_address(_plain(["experiment=paper_locomo_k10", "llm=qwen3_32b_vllm"])) != base


def test_moving_the_cache_keeps_the_address():
    a = _plain(["experiment=quickstart", "paths.cache_dir=cache/one"])
    b = _plain(["experiment=quickstart", "paths.cache_dir=elsewhere/two"])
    assert a.llm["cache_dir"] != b.llm["cache_dir"]
    assert build_address(a) == build_address(b) and build_view(a) == build_view(b)
    assert "cache_dir" not in json.dumps(build_view(a))


def test_engine_resources_keep_the_address():
    base = build_address(_plain(["experiment=cpu_small"]))
    for ov in (["llm.backend.kv_cache_memory_bytes=536870912"], ["llm.backend.cpu_threads_bind=auto"],
               ["llm.backend.enable_prefix_caching=false", "+llm.backend.max_num_seqs=4"], ["llm_chunk_size=16"]):
        assert build_address(_plain(["experiment=cpu_small", *ov])) == base, ov
    assert build_address(_plain(["experiment=cpu_small", "llm.backend.max_model_len=4096"])) != base


def test_code_version_is_part_of_the_address(monkeypatch):
    plain = _plain(["experiment=quickstart"])
    before = build_address(plain)
    import mnemis.address as address

    monkeypatch.setattr(address, "BUILD_CODE_VERSION", address.BUILD_CODE_VERSION + 1)
    assert build_address(plain) != before


def _edit_first_string(path: Path) -> None:
    """Insert a character into the first plain one-line string literal of a module (a prompt text)."""
    import io
    import tokenize

    src = path.read_text()
    tok = next(t for t in tokenize.generate_tokens(io.StringIO(src).readline)
               if t.type == tokenize.STRING and t.string.startswith('"') and not t.string.startswith('"""')
               and len(t.string) > 6)
    lines = src.splitlines(keepends=True)
    row, col = tok.start
    line = lines[row - 1]
    lines[row - 1] = line[:col + 1] + "Z" + line[col + 1:]
    path.write_text("".join(lines))


def test_editing_any_build_prompt_changes_the_address(tmp_path, monkeypatch):
    root = tmp_path / "prompts"
    shutil.copytree(fp.PROMPTS_DIR, root)
    plain = _plain(["experiment=quickstart"])
    real = build_address(plain)
    monkeypatch.setattr(fp, "PROMPTS_DIR", root)
    assert build_address(plain) == real  # the copy addresses like the package
    roles = fp.prompt_modules(root)
    assert {"extract_entities", "extract_facts", "resolve_entities", "dedup_facts", "entity_attributes",
            "categorize", "describe_category"} <= set(roles["build"])
    assert {"answer", "judge_locomo", "judge_longmemeval", "select_nodes"} <= set(roles["other"])
    from mnemis.memory import default_path

    real_path = default_path(plain)
    for name in [*roles["build"], "base"]:
        original = (root / f"{name}.py").read_text()
        _edit_first_string(root / f"{name}.py")
        assert build_address(plain) != real, name
        assert default_path(plain) != real_path, name  # a library memory re-addresses as the CLI's does
        (root / f"{name}.py").write_text(original)
    assert default_path(plain) == real_path
    assert build_address(plain) == real
    for name in ("answer", "judge_locomo", "select_nodes", "mem0_update"):  # not build prompts of the graph
        _edit_first_string(root / f"{name}.py")
    assert build_address(plain) == real
    text = (root / "categorize.py").read_text()
    (root / "categorize.py").write_text("# a comment\n" + text.replace('"""', '"""Docstring edit. ', 1))
    assert build_address(plain) == real  # comments and docstrings do not address a memory


def test_mem0_memory_is_addressed_by_its_own_prompts(tmp_path, monkeypatch):
    root = tmp_path / "prompts"
    shutil.copytree(fp.PROMPTS_DIR, root)
    monkeypatch.setattr(fp, "PROMPTS_DIR", root)
    plain = _plain(["experiment=quickstart"])
    view = build_view(plain, ["mem0"], prompts="mem0")
    assert {"mem0_extract", "mem0_update", "mem0_summary", "extract_entities"} <= set(view["prompts"])
    _edit_first_string(root / "mem0_extract.py")
    assert build_view(plain, ["mem0"], prompts="mem0") != view


# ------------------------------------------------------------------------------------ seeds
def test_seeds_option_validation():
    greedy = AnswerSettings(prompt="terse", prompt_by_method={}, max_tokens=8, temperature=0.0)
    assert run_seeds(3, None, greedy) == [3] and run_seeds(0, [0, 2, 1], greedy) == [0, 2, 1]
    for bad in (5, [], [0, 0], ["a"]):
        with pytest.raises(RoleError, match="seeds="):
            run_seeds(0, bad, greedy)


def test_seeds_run_reports_mean_and_std(tmp_path, locomo_path):
    cfg = compose(["experiment=quickstart", "llm=schema_fake", "embedder=hashing", "methods=[full_context]",
                   "seeds=[0,1]", "answer.temperature=0.5", "judge.leniency.enabled=false",
                   f"paths.artifacts_dir={tmp_path}/a", f"paths.cache_dir={tmp_path}/c",
                   f"paths.shared_data_dir={locomo_path.parent}"])
    run_command(cfg, tmp_path / "out")
    out = tmp_path / "out"
    rows = [json.loads(x) for x in (out / "questions.jsonl").read_text().splitlines()]
    assert sorted({r["seed"] for r in rows}) == [0, 1] and len(rows) == 2 * 4
    m = json.loads((out / "metrics.json").read_text())["full_context"]
    assert m["seeds"] == [0, 1] and m["headline_judge"] == "main"
    assert m["judges"]["main"]["seed_summary"]["overall"]["n"] == 2
    assert m["answer_scores_seeds"]["overall"]["f1"]["n"] == 2
    roles = json.loads((out / "roles.json").read_text())
    assert roles["seeds"] == [0, 1] and roles["answer_prompts"] == {"full_context": "answer@v1"}
    report = (out / "report.md").read_text()
    assert "Repeated runs" in report and "Self-judged" in report and "Answer scores without a judge" in report
    assert "| full_context | 2 |" in report  # the seed table of the answer scores
