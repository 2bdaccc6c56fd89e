# Every target sets itself up on a fresh machine: the venv is made and filled from pyproject.toml.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

NAME ?= whale_c4
BASE_URL ?=
MODEL ?=
RUN_ARGS := $(if $(BASE_URL),--base-url $(BASE_URL)) $(if $(MODEL),--model $(MODEL))

.PHONY: test test-busy lint scenario bench bench-smoke clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The suite in TEST_WORKERS processes, a test file to a process (its module fixtures run once).
# Each test passes beside another busy core, or it is broken; the wall-clock ground truths that
# must run alone are marked `truth` (make test-truth).
TEST_WORKERS ?= 2
test: lint
	tools/ensure_chromium.sh
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

# The wall-clock tests of the sim's HTTP path (sim over loopback, client, SSE, poller) with one
# core kept busy by a bounded busy loop, so timing fragility shows in CI and not on a user's
# laptop. Verdicts and rates against the sim's truth run on the virtual clock and need no guard.
WALL_SIM_TESTS := tests/engine/test_run_integration.py tests/sim/test_sim_server.py \
	tests/sim/test_sim_faults.py tests/sim/test_sim_metrics.py tests/sim/test_sim_runner.py \
	tests/engine/test_sweep_boots.py
HOG_SECONDS ?= 240
test-busy: $(STAMP)
	@timeout $(HOG_SECONDS) sh -c 'while :; do :; done' & hog=$$!; \
	$(BIN)/pytest -q -p no:cacheprovider $(WALL_SIM_TESTS); rc=$$?; \
	kill $$hog 2>/dev/null; wait $$hog 2>/dev/null; exit $$rc

# Real servers (vLLM CPU, llama-server) and the tiny model, cached in ~/.cache/loadgen.
.PHONY: setup-real test-real
setup-real: $(STAMP)
	$(BIN)/python tools/setup_real.py

# --durations: CI's log says where its longest stage spends its time.
test-real: setup-real
	$(BIN)/pytest -m real tests -v --durations=15

# The wall-clock ground truths, run alone: `loadgen tune` against a wall-clock sim with a hidden
# cost card (calibrate, tune a 3 x 3 grid, verify all 9 points with 2 boots each), a fit over
# HTTP that must recover the default card's slopes and its prefill times within 5%, and a
# two-boot fit of a hidden floored card with its fidelity at other budgets (~6 minutes on two
# cores). Beside another busy core the HTTP fit's prefill_ctx_s came out 9% off and the two-boot
# fit's fixed_s 77%.
.PHONY: test-truth
test-truth: $(STAMP)
	$(BIN)/pytest -q -m truth -p no:cacheprovider tests/engine/test_tune_truth.py \
		tests/engine/test_calibrate_http.py tests/engine/test_calibrate_boots.py

# Workers as Ray actors (`--ray ADDRESS`): the optional ray extra goes into the venv, then the
# tests that start a local Ray cluster (one head, 2 CPUs, loopback) and stop it again.
.PHONY: test-ray
test-ray: $(STAMP)
	$(BIN)/pip install --quiet -e '.[ray,test]'
	$(BIN)/pytest -q -m ray -p no:cacheprovider tests/client/test_ray_cluster.py
	$(BIN)/python bench/ceiling.py --smoke --ray --out runs/ceiling-ray

scenario: $(STAMP)
	$(BIN)/loadgen run $(NAME) $(RUN_ARGS)

# Benchmarks of loadgen itself: every bench/*.py at its own size, then one table of their ratios
# (each against a reference measured in the same run). bench-smoke: each at a size that runs in
# seconds (traffic to 127.0.0.1 only), failing if any bench fails or gives no ratio; CI runs it.
bench: $(STAMP)
	$(BIN)/python bench/harness.py

bench-smoke: $(STAMP)
	$(BIN)/python bench/harness.py --smoke

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
