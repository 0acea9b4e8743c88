"""Mem0 and Mem0g baselines (Mem0 paper, arXiv 2504.19413): see :mod:`mnemis.baselines.mem0.pipeline`."""

from mnemis.baselines.mem0.pipeline import Mem0Config, Mem0Run, evaluate_mem0, run_mem0

__all__ = ["Mem0Config", "Mem0Run", "evaluate_mem0", "run_mem0"]
