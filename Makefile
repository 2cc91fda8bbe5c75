# Two commands on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast check demo install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The checks first (seconds), then the whole suite on two workers; slow end-to-end tests included.
test: check
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

# The pure tests alone: the core and the rendering, in seconds.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/core tests/render -q $(PYTEST_ARGS)

# Style, types and layering; each failure names the file and line (or the import that breaks a layer).
check: $(STAMP)
	$(BIN)/ruff format --check bot tests bench
	$(BIN)/ruff check bot tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The whole flow, label to pull request, against a local sandbox GitHub: no account, no model.
demo: $(STAMP)
	$(BIN)/lanebot demo $(DEMO_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
