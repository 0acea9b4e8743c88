#!/usr/bin/env bash
# The GPU checks of System-1 as one prepared script (< 8 min on one GPU): the Triton grouped top-k kernel
# against its torch reference on CUDA (fp32/fp16, LoCoMo- and LongMemEval-shaped), FAISS GPU indexes against
# exact search, then the batched 1,540-query timing (kernel vs torch reference vs FAISS, as ratios).
#
# Needs an environment with `pip install -e ".[gpu,dev]"` (torch with CUDA, triton, faiss-gpu if available).
# Usage: experiments/bench/gpu_system1.sh [results_dir]   (default experiments/results; $OUT when set)
# On a machine without CUDA the tests skip and the timing reports "needs GPU", so it is safe to run anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-python}
RESULTS=${1:-${OUT:-experiments/results}}
mkdir -p "$RESULTS"
"$PY" -c "import torch; print('cuda:', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
timeout 240 "$PY" -m pytest -q -rs -m gpu tests/unit/test_kernels.py tests/unit/index 2>&1 | tee "$RESULTS/gpu_system1_tests.log"
timeout 200 "$PY" experiments/bench/system1_latency.py --parts c --out "$RESULTS/system1_latency_gpu.json"
