# The two set-up commands in README.md: `make run` and `make test`. Both work on a fresh
# Debian machine with Python 3.11+: they create/update .venv and install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
STAMP_BENCH := $(VENV)/.installed-bench

.PHONY: run test test-all bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(PY)
	$(PIP) install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[dev]'
	touch $@ $(STAMP_RUN)

$(STAMP_BENCH): pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[bench]'
	touch $@

# kcat comes from Debian's packages; install it when missing (we run as root on these machines).
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kcat >/dev/null; }

run: $(STAMP_RUN)
	$(VENV)/bin/odradek broker --data-dir ./data --listen 127.0.0.1:9092

test: $(STAMP_DEV) kcat
	$(VENV)/bin/pytest -q

# Everything, slow tests included.
test-all: $(STAMP_DEV) kcat
	$(VENV)/bin/pytest -q -m ''

bench: $(STAMP_BENCH)
	$(PY) bench/throughput.py
	$(PY) bench/client.py --records 1000000
	$(PY) bench/assignors.py
	$(PY) bench/coordinator.py
	$(PY) bench/rebalance.py

clean:
	rm -rf $(VENV) data .pytest_cache
