"""Mnemis's Hydra launcher on Ray Core: one multirun job (one shard) per Ray task (``hydra/launcher=ray``)."""
