"""``mnemis build|eval|run|report [hydra overrides]`` — the only entry point that reads config trees."""

from __future__ import annotations

import logging
import os
import sys

COMMANDS = ("build", "eval", "run", "report", "merge")
USAGE = (
    "usage: mnemis {build,eval,run,report,merge} [key=value ...] [-m for a multirun sweep]\n"
    "  build   ingest the dataset into a memory (store, base graph, hierarchy)\n"
    "  eval    retrieve, answer, judge and score on a built memory\n"
    "  run     build (reused when present) then eval: the main job\n"
    "  report  regenerate the report of a run directory: mnemis report run_dir=runs/...\n"
    "  merge   combine shard run dirs: mnemis merge runs=[dir1,dir2,...] out=dir\n"
)


def _hydra_main() -> None:
    import hydra
    from omegaconf import DictConfig

    from mnemis.config import CONF_DIR

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def _main(cfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig

        from mnemis.data.errors import DataError
        from mnemis.jobs import run_command
        from mnemis.store import StoreError

        try:
            run_command(cfg, output_dir=HydraConfig.get().runtime.output_dir)
        except (DataError, StoreError) as exc:
            raise SystemExit(f"mnemis {cfg.command}: {exc}") from None

    _main()


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        sys.stderr.write(USAGE)
        raise SystemExit(0 if args and args[0] in ("-h", "--help") else 2)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    command, rest = args[0], args[1:]
    if command == "merge":
        from mnemis.scale.merge import merge_command

        merge_command(rest)
        return
    flags, overrides = _split(rest)
    sys.argv = [sys.argv[0], *flags, f"command={command}", *overrides]
    _hydra_main()


_VALUED_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                 "--config-dir", "-cd", "--experimental-rerun"}


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    """Hydra's flags (``-m``, ``--cfg job`` ...) first, then the overrides: argparse wants them apart."""
    flags, overrides, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            flags.append(a)
            if a in _VALUED_FLAGS and i + 1 < len(args):
                flags.append(args[i + 1])
                i += 1
        else:
            overrides.append(a)
        i += 1
    return flags, overrides


if __name__ == "__main__":
    main()
