# The two commands of the README. Both create .venv on first use (about 2 minutes, 4 GB).
VENV ?= .venv
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_ERROR_REPORTING := false

.PHONY: setup run test clean-runs

$(VENV)/.installed: pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV)

setup: $(VENV)/.installed

run: setup
	$(VENV)/bin/mnemis run experiment=quickstart

test: setup
	$(VENV)/bin/python -m pytest -q

clean-runs:
	rm -rf runs outputs multirun
