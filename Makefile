# Two commands on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast check demo install agents clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The real agent CLIs for the tests, at the versions agents/package.json pins, in .agents/ (ignored).
# Without npm the tests that need them skip, saying so; under CI=true they fail instead.
AGENTS := .agents
AGENTS_STAMP := $(AGENTS)/.installed
$(AGENTS_STAMP): agents/package.json
	@if command -v npm >/dev/null; then \
		mkdir -p $(AGENTS) && cp agents/package.json $(AGENTS)/package.json && \
		npm install --prefix $(AGENTS) --no-audit --no-fund --loglevel=error && touch $(AGENTS_STAMP); \
	else echo "npm is not installed: the tests through the real claude and codex CLIs will skip (Node.js 18+ brings npm)"; fi

agents: $(AGENTS_STAMP)

# The checks first (seconds), then the whole suite on two workers; slow end-to-end tests included.
test: check agents
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
	rm -rf $(VENV) $(AGENTS) build *.egg-info .pytest_cache .hypothesis
