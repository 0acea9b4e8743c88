"""Log levels: third-party noise off by default (``verbose=true`` brings it back)."""

from __future__ import annotations

import logging
import os
import sys
import warnings

# Libraries whose INFO/DEBUG (and, for vLLM, per-weight dtype WARNING) lines drown the progress lines.
NOISY = {"vllm": logging.ERROR, "bm25s": logging.WARNING, "transformers": logging.ERROR,
         "sentence_transformers": logging.WARNING, "httpx": logging.WARNING, "urllib3": logging.WARNING,
         "filelock": logging.WARNING, "huggingface_hub": logging.WARNING, "faiss": logging.WARNING,
         "torch": logging.ERROR, "matplotlib": logging.WARNING, "PIL": logging.WARNING, "numexpr": logging.WARNING,
         "wandb": logging.WARNING, "gguf": logging.WARNING}


class _Below(logging.Filter):
    """Drops records under ``level``."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level


def quiet_third_party(verbose: bool = False) -> None:
    """Raise the log level of noisy libraries (and set their env switches before they are imported)."""
    if verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")
        return
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")               # torch's C++ warnings (NUMA binding ...)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")   # inherited by vLLM's worker processes
    if not sys.stderr.isatty():  # weight-loading bars are carriage-return noise in a log file
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for name, level in NOISY.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not any(isinstance(f, _Below) for f in logger.filters):
            logger.addFilter(_Below(level))  # holds even when the library resets its level on import (bm25s)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"(torch|transformers|vllm)\..*")
