# Two commands for newcomers: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-test
RUN_STAMP := $(VENV)/.installed-run
TRAINER_STAMP := $(VENV)/.installed-trainer
# Where `make run` listens: `make run HOST=0.0.0.0 PORT=9000` for trainers on other machines.
HOST ?= 127.0.0.1
PORT ?= 8080
# Test processes: each runs whole files (their module fixtures start services once). Most of
# the suite's time is end-to-end tests waiting on real windows and timers, so three keep two
# cores busy; `make test TEST_WORKERS=0` runs in one process.
TEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

.PHONY: run trainer test test-fast lint bench bench-quick clean

# Running the service needs the service and the SDK (the README's snippet runs in .venv); the
# tests also need PyTorch and tools.
$(RUN_STAMP): pyproject.toml $(wildcard client/pyproject.toml) scripts/setup-venv.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup-venv.sh run
	touch $(RUN_STAMP)

$(TRAINER_STAMP): $(RUN_STAMP)
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup-venv.sh trainer
	touch $(TRAINER_STAMP)

$(STAMP): pyproject.toml $(wildcard client/pyproject.toml) scripts/setup-venv.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup-venv.sh test
	touch $(STAMP) $(RUN_STAMP) $(TRAINER_STAMP)

## Run the service (API, aggregator, /metrics) on an embedded PostgreSQL, with a demo fleet.
run: $(RUN_STAMP)
	$(VENV)/bin/ett serve --demo --host $(HOST) --port $(PORT)

## Add a CPU-only PyTorch to .venv, for examples/train_elastic.py (no CUDA download).
trainer: $(TRAINER_STAMP)

## Run the whole test suite the way CI does (system tools installed when missing).
test: $(STAMP)
	bash scripts/install-system-deps.sh
	$(VENV)/bin/ruff check .
	$(PYTEST)

## The fast suite only (no end-to-end tests with real processes).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m bench

bench-quick: $(STAMP)
	$(PY) -m bench --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
