"""``mnemis build|eval|run|report [hydra overrides]`` — the only entry point that reads config trees."""

from __future__ import annotations

import logging
import os
import sys

COMMANDS = ("build", "eval", "run", "report")
USAGE = (
    "usage: mnemis {build,eval,run,report} [key=value ...] [-m for a multirun sweep]\n"
    "  build   ingest the dataset into a memory (store, base graph, hierarchy)\n"
    "  eval    retrieve, answer, judge and score on a built memory\n"
    "  run     build (reused when present) then eval: the main job\n"
    "  report  regenerate the report of a run directory: mnemis report run_dir=runs/...\n"
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
    sys.argv = [sys.argv[0], f"command={command}", *rest]
    _hydra_main()


if __name__ == "__main__":
    main()
