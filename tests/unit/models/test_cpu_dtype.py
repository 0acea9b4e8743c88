"""On CPU, ``dtype: auto`` loads float32 where the CPU has no bf16 matrix instructions; nothing else changes."""

from __future__ import annotations

from mnemis.models.llm.cpu_dtype import cpu_flags, engine_dtype, has_bf16_matmul

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx avx2 fma\n"
SPR = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM = "Features\t: fp asimd sve bf16 i8mm\n"


def test_flags_of_x86_and_arm_cpuinfo():
    assert {"avx2", "fma"} <= cpu_flags(AVX2) and not has_bf16_matmul(cpu_flags(AVX2))
    assert has_bf16_matmul(cpu_flags(SPR)) and has_bf16_matmul(cpu_flags(ARM))
    assert cpu_flags("") == set()


def test_auto_becomes_float32_only_on_a_cpu_without_bf16():
    avx2, spr = cpu_flags(AVX2), cpu_flags(SPR)
    assert engine_dtype("auto", on_cpu=True, flags=avx2) == "float32"
    assert engine_dtype(None, on_cpu=True, flags=avx2) == "float32"
    assert engine_dtype("auto", on_cpu=True, flags=spr) == "auto"       # bf16 runs natively: the checkpoint's
    assert engine_dtype("bfloat16", on_cpu=True, flags=avx2) == "bfloat16"  # an explicit dtype is kept
    assert engine_dtype("auto", on_cpu=False, flags=avx2) == "auto"      # a GPU: untouched


def test_the_peers_server_gets_the_same_dtype(monkeypatch):
    from mnemis.baselines.peers.common import server_options
    from mnemis.models.llm import cpu_dtype, cpu_threads, local_server
    from tests.helpers.compose import peers_settings

    monkeypatch.setattr(cpu_threads, "running_on_cpu", lambda: True)
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda cpuinfo=None: cpu_flags(AVX2))
    cmd, _ = local_server.server_command(server_options(peers_settings()), "/m", 8123)
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda cpuinfo=None: cpu_flags(SPR))
    assert "--dtype" not in local_server.server_command(server_options(peers_settings()), "/m", 8123)[0]
