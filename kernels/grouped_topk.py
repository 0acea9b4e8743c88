"""Grouped top-k inner product: many queries against one matrix holding many groups, one launch.

Each query scans only the rows of its own group. Rows must be sorted by group so that a group is the
contiguous slice ``[start, end)`` of the matrix; :func:`mnemis.ops.grouped_topk` does the sorting and
the bookkeeping, this module only launches the kernel.

One program per query: it streams its group's rows in blocks of ``BLOCK_N``, computes the inner
products (vector-times-matrix; memory-bound, so no ``tl.dot`` is needed and the kernel also runs under
``TRITON_INTERPRET=1`` on CPU), and keeps a running top-k in registers. A block is merged only when its
best score beats the current k-th best; the merge picks the k largest of (running top-k ∪ block) by
k rounds of max/argmax. ``k`` is at most 128.
"""

from __future__ import annotations

import triton
import triton.language as tl

MAX_K = 128


@triton.jit
def _grouped_topk_kernel(
    q_ptr, m_ptr, start_ptr, end_ptr, out_s_ptr, out_i_ptr,
    D, stride_q, stride_m, stride_os, stride_oi,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid = tl.program_id(0)
    start = tl.load(start_ptr + pid)
    end = tl.load(end_ptr + pid)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    q = tl.load(q_ptr + pid * stride_q + offs_d, mask=dmask, other=0.0).to(tl.float32)
    kidx = tl.arange(0, K_PAD)
    nidx = tl.arange(0, BLOCK_N)
    best_s = tl.full([K_PAD], float("-inf"), tl.float32)
    best_i = tl.full([K_PAD], -1, tl.int32)
    n_blocks = tl.cdiv(end - start, BLOCK_N)
    for b in range(0, n_blocks):
        offs_n = start + b * BLOCK_N + nidx
        valid = offs_n < end
        x = tl.load(m_ptr + offs_n[:, None].to(tl.int64) * stride_m + offs_d[None, :],
                    mask=valid[:, None] & dmask[None, :], other=0.0).to(tl.float32)
        s = tl.sum(x * q[None, :], axis=1)
        s = tl.where(valid, s, float("-inf"))
        kth = tl.min(tl.where(kidx < K, best_s, float("inf")), axis=0)
        if tl.max(s, axis=0) > kth:
            new_s = tl.full([K_PAD], float("-inf"), tl.float32)
            new_i = tl.full([K_PAD], -1, tl.int32)
            for j in tl.static_range(K):
                m1 = tl.max(best_s, axis=0)
                a1 = tl.argmax(best_s, axis=0)
                m2 = tl.max(s, axis=0)
                a2 = tl.argmax(s, axis=0)
                from_block = m2 > m1
                val = tl.where(from_block, m2, m1)
                i1 = tl.sum(tl.where(kidx == a1, best_i, 0), axis=0)
                idx = tl.where(from_block, start + b * BLOCK_N + a2, i1)
                idx = tl.where(val == float("-inf"), -1, idx)
                new_s = tl.where(kidx == j, val, new_s)
                new_i = tl.where(kidx == j, idx, new_i)
                best_s = tl.where(kidx == a1, tl.where(from_block, best_s, float("-inf")), best_s)
                s = tl.where(nidx == a2, tl.where(from_block, float("-inf"), s), s)
            best_s = new_s
            best_i = new_i
    kmask = kidx < K
    tl.store(out_s_ptr + pid * stride_os + kidx, best_s, mask=kmask)
    tl.store(out_i_ptr + pid * stride_oi + kidx, best_i, mask=kmask)


def grouped_topk_sorted(queries, starts, ends, matrix, k: int, *, block_n: int = 64):
    """Launch the kernel. ``matrix`` rows sorted by group; query ``q`` scans rows ``[starts[q], ends[q])``.

    Args:
        queries: ``[Q, d]`` float tensor (fp32/fp16/bf16), same device as ``matrix``.
        starts, ends: ``[Q]`` int32 row ranges.
        matrix: ``[N, d]`` float tensor, rows contiguous.
        k: results per query (1..128).

    Returns:
        ``(scores [Q, k] float32, rows [Q, k] int32)``; missing results are ``-inf`` / ``-1``.
    """
    import torch

    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be in [1, {MAX_K}] for the Triton kernel, got {k}")
    queries, matrix = queries.contiguous(), matrix.contiguous()
    nq, d = queries.shape
    out_s = torch.empty((nq, k), dtype=torch.float32, device=queries.device)
    out_i = torch.empty((nq, k), dtype=torch.int32, device=queries.device)
    if nq == 0:
        return out_s, out_i
    _grouped_topk_kernel[(nq,)](
        queries, matrix, starts, ends, out_s, out_i,
        d, queries.stride(0), matrix.stride(0), out_s.stride(0), out_i.stride(0),
        K=k, K_PAD=triton.next_power_of_2(k), BLOCK_N=block_n, BLOCK_D=triton.next_power_of_2(d),
    )
    return out_s, out_i
