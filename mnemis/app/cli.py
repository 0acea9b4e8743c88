"""``mnemis <command> [hydra overrides]`` — the only entry point that reads config trees."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

HYDRA_COMMANDS = ("build", "eval", "run", "retrieve", "report")
COMMANDS = (*HYDRA_COMMANDS, "merge", "compare", "data", "models", "doctor")
USAGE = (
    "usage: mnemis <command> [key=value ...] [-m for a multirun sweep]\n"
    "\n"
    "commands:\n"
    "  data     fetch or list the benchmark files: mnemis data fetch [locomo|locomo_audit|judge_stress|\n"
    "           longmemeval_s|beam|locomo_plus|all] (large, by name only: longmemeval_m|beam_500K|beam_1M|\n"
    "           beam_10M); mnemis data list\n"
    "  models   list or download the model weights a config needs: mnemis models list|fetch experiment=...\n"
    "  doctor   check data, weights, GPU memory, launcher plugins and dirs: mnemis doctor experiment=...\n"
    "           (gpu=h200, h100-80gb, a100-80gb, l40s, h200x4: plan the GPU memory for a card not in this machine)\n"
    "  build    ingest the dataset into a memory (store, base graph, hierarchy)\n"
    "  eval     retrieve, answer, judge and score on a built memory\n"
    "  run      doctor's checks, build (reused when present), then eval: the main job\n"
    "  retrieve as run, but stops after retrieval: each question's context and each route's evidence recall\n"
    "           (recall.json), no answer or judge model: tune retrieval cheaply, e.g. a sweep with\n"
    "           optimized_metric=\"'recall.json#mnemis/fused.overall.direct'\"\n"
    "  report   regenerate the report of a run directory: mnemis report run_dir=runs/...\n"
    "  merge    combine shard run dirs: mnemis merge runs=[dir1,dir2,...] out=dir\n"
    "  compare  one table and plot across run dirs or a sweep: mnemis compare runs/multirun/<date>/<time>\n"
    "\n"
    "examples:\n"
    "  mnemis run experiment=quickstart                    # CPU, tiny models, about 5 minutes\n"
    "  mnemis doctor experiment=paper_locomo_k10           # before a GPU run\n"
    "  mnemis run experiment=paper_locomo_k10 retrieval.k=30\n"
    "  mnemis run --help                                   # config groups and their options\n"
    "  mnemis run experiment=quickstart --cfg job -p retrieval   # print the composed config\n"
    "  mnemis run -m experiment=quickstart hparams_search=quickstart_system1   # an Optuna search (.[sweep])\n"
    "\n"
    "options: --version, -h/--help; verbose=true shows third-party library logs\n"
)


def _hydra_main() -> None:
    import hydra
    from omegaconf import DictConfig

    from mnemis.config import CONF_DIR

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def _main(cfg: DictConfig) -> float | None:
        from hydra.core.hydra_config import HydraConfig

        from mnemis.app.jobs import run_command
        from mnemis.app.objective import sweep_objective
        from mnemis.app.provenance import write_provenance
        from mnemis.data.errors import DataError
        from mnemis.logs import quiet_third_party
        from mnemis.roles import RoleError
        from mnemis.store import StoreError

        quiet_third_party(bool(cfg.get("verbose", False)))
        _pin_joblib_worker(cfg, HydraConfig.get())  # before anything touches CUDA
        if cfg.get("hub_offline"):
            os.environ["HF_HUB_OFFLINE"] = "1"
        if cfg.command in ("run", "build", "retrieve") and cfg.get("preflight", True):
            _preflight(cfg, HydraConfig.get().launcher.get("_target_"))
        out = HydraConfig.get().runtime.output_dir
        if cfg.command != "report":
            write_provenance(out)
        try:
            run_command(cfg, output_dir=out)
        except (DataError, StoreError, RoleError) as exc:
            raise SystemExit(f"mnemis {cfg.command}: {exc}") from None
        return sweep_objective(cfg, out)  # what an optimising sweeper reads (optimized_metric; None when unset)

    _main()


def _pin_joblib_worker(cfg: Any, hydra_cfg: Any) -> None:
    """Under the joblib launcher, a job needing GPUs (``scale.gpus_per_job``) gets its worker's own
    (``CUDA_VISIBLE_DEVICES``; :mod:`mnemis.scale.gpu_slots`), not GPU 0 shared by every worker."""
    launcher = str(hydra_cfg.launcher.get("_target_") or "")
    per_job = int((cfg.get("scale") or {}).get("gpus_per_job") or 0)
    if "JoblibLauncher" not in launcher or per_job < 1:
        return
    import hashlib
    import tempfile
    from pathlib import Path

    from mnemis.scale.gpu_slots import pin_worker

    sweep = str(Path(str(hydra_cfg.sweep.dir)).resolve())
    lock_dir = Path(tempfile.gettempdir()) / f"mnemis-gpu-slots-{hashlib.sha256(sweep.encode()).hexdigest()[:10]}"
    gpus = pin_worker(per_job, lock_dir)
    if gpus:
        logging.getLogger(__name__).info("this worker's GPUs: CUDA_VISIBLE_DEVICES=%s", ",".join(gpus))


def _preflight(cfg: object, launcher: str | None) -> None:
    """``mnemis doctor``'s checks (no hub calls); stop before the build when one blocks."""
    from mnemis.app.doctor import preflight, print_table
    from mnemis.config import to_plain

    blocking = preflight(to_plain(cfg), launcher)
    if blocking:
        print_table(blocking, sys.stderr)
        raise SystemExit(f"mnemis {cfg.command}: {len(blocking)} check(s) failed before the build; "  # type: ignore[attr-defined]
                         "`mnemis doctor <same overrides>` prints every check (preflight=false skips them)")


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("--version", "-V"):
        from mnemis import __version__

        print(f"mnemis {__version__}")
        return
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        if args and args[0] not in ("-h", "--help"):
            sys.stderr.write(f"mnemis: unknown command {args[0]!r}\n\n")
        sys.stderr.write(USAGE)
        raise SystemExit(0 if args and args[0] in ("-h", "--help") else 2)
    # The HF hub is online unless the user (or the Makefile / CI) sets HF_HUB_OFFLINE=1 or hub_offline=true.
    # W&B runs offline unless tracker.mode=online (the tracker passes the mode to wandb.init).
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    command, rest = args[0], args[1:]
    if command not in HYDRA_COMMANDS:  # Hydra sets up logging for its own commands
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if command == "merge":
        from mnemis.app.merge_command import merge_command

        merge_command(rest)
        return
    if command == "compare":
        from mnemis.app.compare import compare_command

        raise SystemExit(compare_command(rest))
    if command == "data":
        from mnemis.app.data_command import data_command

        raise SystemExit(data_command(rest))
    if command in ("models", "doctor"):
        from mnemis.app.doctor import doctor_command, models_command

        raise SystemExit(models_command(rest) if command == "models" else doctor_command(rest))
    flags, overrides = _split(rest)
    sys.argv = ["mnemis", f"command={command}", *overrides, *flags]
    _hydra_main()


_VALUED_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                 "--config-dir", "-cd", "--experimental-rerun"}
_INFO_CHOICES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    """Hydra's flags (``-m``, ``--cfg job``, ``--info [what]`` ...) apart from the overrides: argparse wants
    the overrides first, and a flag with an optional value (``--info``) last so it takes no override."""
    flags, overrides, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            flags.append(a)
            nxt = args[i + 1] if i + 1 < len(args) else None
            if nxt is not None and (a in _VALUED_FLAGS or (a in ("--info", "-i") and nxt in _INFO_CHOICES)):
                flags.append(nxt)
                i += 1
        else:
            overrides.append(a)
        i += 1
    return flags, overrides


if __name__ == "__main__":
    main()
