"""Running a benchmark's ``mnemis run`` and replaying it from its cache archive: the run itself (:func:`run_mode`),
where its replies are cached and archived, the figures a replay must reproduce, what differs between the machine that
made an archive and this one, and the record a replay leaves in the benchmark's JSON. Shared by
``experiments/bench/cpu_quality.py``, ``heldout_ablations.py``, ``tuned_dev.py`` and ``graphiti_builder.py``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # the source checkout the benchmarks run in (relative paths start here)


# ``--paper-reply-caps cpu``: completion-token caps of the base-graph stages in paper mode (twice our defaults).
# Paper mode's budgets follow the reply schemas (``auto``: up to thousands of tokens per extraction reply, since
# the paper puts no cap on names or facts). On 2 cores a few parallel sequences decode at about 3 tokens per
# second (docs/engine_settings.md), so one reply that ran away (a name list repeating itself) would hold its
# batch for many minutes. A reply cut at a cap keeps its complete items (salvaged) and counts as truncated in
# the run's health, so how often a cap bit is in the JSON.
PAPER_CPU_REPLY_CAPS = {"extract_entities": 320, "reflect_entities": 192, "extract_facts": 1024,
                        "reflect_facts": 768, "resolve_entities": 256, "dedup_facts": 384, "entity_attributes": 384}

# ``--reply-caps cpu`` of the ablation benchmarks: retrieval.system2.max_tokens of our default
# (conf/retrieval/mnemis.yaml), whose complete selections a cut reply keeps
SELECT_CAP_CPU = 512


def paper_cap_overrides(caps: str) -> list[str]:
    """The overrides of ``--paper-reply-caps`` (``cpu``: :data:`PAPER_CPU_REPLY_CAPS`; ``none``: the schemas')."""
    if caps == "none":
        return []
    # reply_budget=off: the caps hold as given (the default policy, raise, would lift each to its schema's worst
    # case); stages whose budget is auto keep their worst case under every policy
    return ["reply_budget=off", *(f"ingest.max_tokens.{stage}={n}" for stage, n in PAPER_CPU_REPLY_CAPS.items())]


# ------------------------------------------------------------------------------------------ running
def run_mode(mode: str, experiment: str, run_dir: Path, overrides: Sequence[str],
             stderr_path: Path | None = None, command: str = "run") -> float:
    """``mnemis <command> experiment=... mode=...`` into ``run_dir``; returns its wall seconds. ``command``: ``run``
    (default) or ``retrieve`` (stops after retrieval). ``stderr_path``: the run's standard error goes to that file
    (a replay reads why it stopped there)."""
    if mode == "paper" and not any(o.lstrip("+").startswith("judge_llms.paper") for o in overrides):
        # the paper judged with GPT-4.1-mini, which this machine cannot reach: judge with the model under test
        # (as the tuned mode does), so the two modes differ only in the method
        overrides = [*overrides, "judge_llms.paper=${llm}"]
    cmd = [sys.executable, "-m", "mnemis.app.cli", command, f"experiment={experiment}", f"mode={mode}",
           f"hydra.run.dir={run_dir}", *overrides]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline",
           "WANDB_ERROR_REPORTING": "false"}
    print("+", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    if stderr_path is None:
        subprocess.run(cmd, cwd=REPO, env=env, check=True)
    else:
        Path(stderr_path).parent.mkdir(parents=True, exist_ok=True)
        with open(stderr_path, "w") as err:
            subprocess.run(cmd, cwd=REPO, env=env, check=True, stderr=err)
    return time.perf_counter() - t0


def run_cache_dir(overrides: Sequence[str]) -> Path:
    """The response cache dir a run with ``overrides`` uses (``paths.cache_dir``, default ``.cache/mnemis``)."""
    given = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("paths.cache_dir=")]
    path = Path(given[-1] if given else ".cache/mnemis")
    return path if path.is_absolute() else REPO / path


def archive_path(out: Path) -> Path:
    return out.with_name(out.stem + ".cache.jsonl.gz")


# figures a replay must reproduce: everything but wall times, paths, the machine and the ledger of what this
# run sent to a model ("stages": a replay sends nothing; the build's token counters, which count cached
# replies too, are compared)
# ("baselines_model_run": the ledger and timers of an earlier sitting whose replies the run replayed)
_VOLATILE = ("wall_s", "total_wall_s", "method_wall_s", "run_dir", "store", "host", "seconds", "load", "stages",
             "cache_dir", "cache_archive", "command", "status", "kept_from", "baselines_model_run",
             "figures_before_refill", "mode_overrides")  # (a refill keeps the figures it replaced beside the new
# ones; mode_overrides: the settings the bench added to a mode, recorded beside its figures, not one of them)


def figures(obj: Any) -> Any:
    """``obj`` without the keys that differ between two runs of the same work (times, paths)."""
    if isinstance(obj, dict):
        return {k: figures(v) for k, v in obj.items() if not any(k == x or k.endswith(x) for x in _VOLATILE)}
    if isinstance(obj, list):
        return [figures(v) for v in obj]
    return obj


def host() -> dict[str, Any]:
    from mnemis.app.provenance import host as machine

    return machine()


def replay_stopped(mode: str, returncode: int, made_on: dict[str, Any], here: dict[str, Any]) -> str:
    """Why a replay run stopped, for the reader: a ``replay_only cache miss`` in its log means this machine built a
    request the archive does not hold; what differs between the machine that made the archive and this one (CPU
    vector features, library versions) is the first suspect."""
    lines = [(f"{mode}: the replay stopped (exit {returncode}); a 'replay_only cache miss' above names the stage "
              "whose request this machine built differently from the run that made the archive.")]
    if "cpu_features" not in made_on:
        lines.append("The archive does not record the machine that made it; this machine: "
                     f"{here.get('cpu')} with {', '.join(here.get('cpu_features') or []) or 'no known vector features'}.")
    else:
        if made_on["cpu_features"] != here.get("cpu_features"):
            lines.append(f"CPU vector features: archive {', '.join(made_on['cpu_features']) or 'none known'}; "
                         f"here {', '.join(here.get('cpu_features') or []) or 'none known'}.")
        was, now = made_on.get("versions") or {}, here.get("versions") or {}
        moved = sorted(k for k in set(was) | set(now) if k != "mnemis" and was.get(k) != now.get(k))
        if moved:
            lines.append("library versions: " + "; ".join(f"{k} {was.get(k)} -> {now.get(k)}" for k in moved) + ".")
        if len(lines) == 1:
            lines.append("The CPU features and library versions match the archive's: compare the code versions.")
    lines.append("Embeddings and similarities can differ in the last bits between CPUs with other vector features "
                 "or other library versions, and one comparison that flips (a candidate at a similarity threshold, "
                 "a near-tie at a top-k cut) changes a prompt downstream.")
    return "\n".join(lines)


# the settings that choose the CPU kernels and threads of torch, oneDNN, MKL, OpenBLAS and numpy (a replay records them)
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE",
              "NPY_DISABLE_CPU_FEATURES", "OMP_NUM_THREADS")


_BUILT = re.compile(r"built (\w+) in [\d.]+ s|(starting the vLLM engine)")


def models_loaded(run_dirs: Sequence[Path]) -> list[str]:
    """The models the runs in ``run_dirs`` built weights for, from their logs: the embedder or reranker (built on a
    miss of its cache only) and ``llm engine`` (a vLLM engine started; a replay builds the LLM client lazily)."""
    found: set[str] = set()
    for d in run_dirs:
        log = Path(d) / "mnemis.log"
        for m in _BUILT.finditer(log.read_text(errors="replace") if log.is_file() else ""):
            found.add("llm engine" if m.group(2) else m.group(1))
    return sorted(found - {"llm", "selector_llm", "answer_llm"})


def replay_record(run_dirs: Sequence[Path], archive: Path, counts: dict[str, int] | None) -> dict[str, Any]:
    """What a replay that reproduced every figure measured: this machine, the torch kernel path and thread settings
    it ran under, the models it had to load, and (``counts``: it re-archived) the archive's entries and size."""
    env = {k: os.environ.get(k) for k in KERNEL_ENV}
    rec: dict[str, Any] = {"every_figure_reproduced": True, "host": host(),
                           "env": {k: v for k, v in env.items() if v is not None},
                           "models_loaded": models_loaded(run_dirs)}
    if counts is not None:
        rec["archive"] = {"file": os.path.relpath(archive, REPO), "bytes": archive.stat().st_size, **counts}
    return rec


_MISS = re.compile(r"replay_only cache miss in stage '([^']+)': (\d+) request\(s\) have no stored response "
                   r"\(first key (\w+)")


def replay_misses(files: Sequence[Path]) -> list[dict[str, Any]]:
    """The cache misses a replay's logs name (stage, requests, first key), each once, in order."""
    found: dict[tuple, dict[str, Any]] = {}
    for f in files:
        for m in _MISS.finditer(Path(f).read_text(errors="replace") if Path(f).is_file() else ""):
            found.setdefault(m.groups(), {"stage": m.group(1), "requests": int(m.group(2)), "first_key": m.group(3)})
    return list(found.values())


def record_failed_replay(out: Path, misses: dict[str, list[dict[str, Any]]], run_dirs: Sequence[Path]) -> None:
    """Keep a replay that did not reproduce every figure in ``out``'s JSON (``replay_attempts``: this machine, its
    kernel settings and, per mode or variant, the requests the archive did not hold); the archive is left as it is."""
    saved = json.loads(out.read_text())
    rec = {**replay_record(run_dirs, archive_path(out), None), "every_figure_reproduced": False, "misses": misses}
    saved["replay_attempts"] = [*saved.get("replay_attempts", []), rec]
    out.write_text(json.dumps(saved, indent=2, default=str) + "\n")
    print(f"the failed replay is recorded in {out} (replay_attempts)")


def rearchive(out: Path, work_cache: Path, run_dirs: Sequence[Path]) -> dict[str, Any]:
    """After a replay that reproduced every figure: write its cache (the archive's replies plus the embeddings and
    token counts the replay recorded) back as the archive, and the replay's record into ``out``'s JSON."""
    from mnemis.models.cache_archive import export_archive

    archive = archive_path(out)
    counts = export_archive(work_cache, archive)
    saved = json.loads(out.read_text())
    before = {k: v for k, v in (saved.get("cache_archive") or {}).items() if k != "file"}
    saved["cache_archive"] = {"file": os.path.relpath(archive, REPO), **counts}
    if saved.get("replay"):  # an earlier replay's record stays, oldest first
        saved["earlier_replays"] = [*saved.get("earlier_replays", []), saved["replay"]]
    saved["replay"] = {**replay_record(run_dirs, archive, counts), "archive_before": before}
    out.write_text(json.dumps(saved, indent=2, default=str) + "\n")
    print(f"re-archived {archive} ({archive.stat().st_size:,} bytes: {counts}); replay recorded in {out}")
    return saved["replay"]


def refill_record(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, Any]:
    """What a refill (a re-run with the archive as the response cache and the model loaded) added: the replies the
    archive held and, per stage, those the model made anew (``before`` / ``after``: the cache's
    :func:`mnemis.models.cache_archive.stage_counts`)."""
    added = {st: n["replies"] - before.get(st, {}).get("replies", 0) for st, n in after.items()}
    return {"replies_in_archive_before": sum(v["replies"] for v in before.values()),
            "replies_added_by_model": {k: v for k, v in added.items() if v},
            "why": "the archive was made on another CPU before embeddings were archived; this machine built some "
                   "requests differently, the model answered those, the rest were replayed"}
