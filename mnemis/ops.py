"""Fused operations with a pure-torch reference and an optional Triton kernel (``mnemis.kernels``).

:func:`grouped_topk` dispatches: the Triton kernel when the tensors are on CUDA and triton is installed,
or when ``TRITON_INTERPRET=1`` is set explicitly (CPU interpreter, tiny shapes only); otherwise the
torch reference. Both return the same thing, so callers never care which ran.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Literal

log = logging.getLogger(__name__)

Backend = Literal["auto", "triton", "torch"]
_logged: set[str] = set()


def grouped_topk_reference(queries, query_groups, matrix, row_groups, k: int, *, chunk: int = 1024):
    """Top-``k`` inner products of each query against the rows of its own group (torch).

    Args:
        queries: ``[Q, d]`` float tensor.
        query_groups: ``[Q]`` integer group id per query.
        matrix: ``[N, d]`` float tensor (any row order).
        row_groups: ``[N]`` integer group id per row.
        k: results per query.
        chunk: queries per matmul (bounds the ``[chunk, N]`` score buffer).

    Returns:
        ``(scores [Q, k'] float32, rows [Q, k'] int64)`` with ``k' = min(k, N)``, best first; rows index
        ``matrix``. When a group has fewer than ``k'`` rows the tail is ``-inf`` / ``-1``.
    """
    import torch

    _check(queries, query_groups, matrix, row_groups, k)
    nq, n = queries.shape[0], matrix.shape[0]
    kk = min(k, n)
    scores = torch.full((nq, kk), float("-inf"), dtype=torch.float32, device=queries.device)
    rows = torch.full((nq, kk), -1, dtype=torch.int64, device=queries.device)
    if kk == 0:
        return scores, rows
    mat = matrix.float()
    for s in range(0, nq, chunk):
        sims = queries[s : s + chunk].float() @ mat.T
        sims.masked_fill_(query_groups[s : s + chunk, None] != row_groups[None, :], float("-inf"))
        top = torch.topk(sims, kk, dim=1)
        scores[s : s + chunk] = top.values
        rows[s : s + chunk] = torch.where(torch.isinf(top.values), -1, top.indices)
    return scores, rows


def _check(queries, query_groups, matrix, row_groups, k: int) -> None:
    if queries.ndim != 2 or matrix.ndim != 2 or queries.shape[1] != matrix.shape[1]:
        raise ValueError(f"queries {tuple(queries.shape)} and matrix {tuple(matrix.shape)} must be [Q, d] and [N, d]")
    if query_groups.shape != (queries.shape[0],) or row_groups.shape != (matrix.shape[0],):
        raise ValueError("query_groups must be [Q] and row_groups [N]")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def triton_available(device) -> bool:
    """Whether the Triton path can run for tensors on ``device``."""
    import torch

    if importlib.util.find_spec("triton") is None:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def grouped_topk(queries, query_groups, matrix, row_groups, k: int, backend: Backend = "auto", *, presorted: bool = False):
    """Grouped top-k inner product (see :func:`grouped_topk_reference` for the contract).

    Args:
        backend: ``auto`` (Triton when :func:`triton_available`, else torch), ``triton`` or ``torch``.
        presorted: the caller guarantees ``row_groups`` is non-decreasing (skips a sort of the matrix;
            keep the matrix sorted once and reuse it for every batch).
    """
    import torch

    if backend not in ("auto", "triton", "torch"):
        raise ValueError(f"unknown backend {backend!r} (auto, triton, torch)")
    use_triton = backend == "triton" or (backend == "auto" and triton_available(queries.device))
    if backend == "triton" and not triton_available(queries.device):
        raise RuntimeError("backend='triton' needs triton and CUDA tensors (or TRITON_INTERPRET=1)")
    name = "triton" if use_triton else "torch"
    if name not in _logged:
        log.info("grouped_topk backend: %s", name)
        _logged.add(name)
    if not use_triton:
        return grouped_topk_reference(queries, query_groups, matrix, row_groups, k)

    from mnemis.kernels.grouped_topk import MAX_K, grouped_topk_sorted

    _check(queries, query_groups, matrix, row_groups, k)
    kk = min(k, matrix.shape[0])
    if kk > MAX_K:
        log.warning("grouped_topk: k=%d > %d, using the torch reference", kk, MAX_K)
        return grouped_topk_reference(queries, query_groups, matrix, row_groups, k)
    nq = queries.shape[0]
    if kk == 0:
        return (torch.full((nq, 0), float("-inf"), device=queries.device), torch.full((nq, 0), -1, dtype=torch.int64,
                                                                                      device=queries.device))
    order = None
    sorted_groups, mat = row_groups, matrix
    if not presorted and row_groups.numel() > 1 and bool((row_groups[1:] < row_groups[:-1]).any()):
        sorted_groups, order = torch.sort(row_groups, stable=True)
        mat = matrix[order]
    starts = torch.searchsorted(sorted_groups.contiguous(), query_groups, right=False).to(torch.int32)
    ends = torch.searchsorted(sorted_groups.contiguous(), query_groups, right=True).to(torch.int32)
    scores, rows = grouped_topk_sorted(queries, starts, ends, mat, kk)
    rows = rows.long()
    if order is not None:
        rows = torch.where(rows >= 0, order[rows.clamp(min=0)], rows)
    return scores, rows
