# Two commands for newcomers: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-test
RUN_STAMP := $(VENV)/.installed-run

.PHONY: run test test-fast lint bench bench-quick clean

# Running the service needs only the service; the tests also need the SDK, PyTorch and tools.
$(RUN_STAMP): pyproject.toml scripts/setup-venv.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup-venv.sh run
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml $(wildcard client/pyproject.toml) scripts/setup-venv.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup-venv.sh test
	touch $(STAMP) $(RUN_STAMP)

## Run the service (API, aggregator, /metrics) on an embedded PostgreSQL, with a demo fleet.
run: $(RUN_STAMP)
	$(VENV)/bin/ett serve --demo

## Run the whole test suite the way CI does (system tools installed when missing).
test: $(STAMP)
	bash scripts/install-system-deps.sh
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

## The fast suite only (no end-to-end tests with real processes).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m bench

bench-quick: $(STAMP)
	$(PY) -m bench --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
