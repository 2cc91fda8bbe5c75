# Two commands on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The whole flow, label to pull request, against a local sandbox GitHub: no account, no model.
demo: $(STAMP)
	$(BIN)/lanebot demo $(DEMO_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
