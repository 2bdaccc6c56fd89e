# Every target sets itself up on a fresh machine: the venv is made and filled from pyproject.toml.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

NAME ?= whale_c4
BASE_URL ?=
MODEL ?=
RUN_ARGS := $(if $(BASE_URL),--base-url $(BASE_URL)) $(if $(MODEL),--model $(MODEL))

.PHONY: test lint scenario bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	tools/ensure_chromium.sh
	$(BIN)/pytest -q

# Real servers (vLLM CPU, llama-server) and the tiny model, cached in ~/.cache/loadgen.
.PHONY: setup-real test-real
setup-real: $(STAMP)
	$(BIN)/python tools/setup_real.py

test-real: setup-real
	$(BIN)/pytest -m real tests/real -v

scenario: $(STAMP)
	$(BIN)/loadgen run $(NAME) $(RUN_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/client_ingest.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
