# The two set-up commands in README.md: `make run` and `make test`. Both work on a fresh
# Debian machine with Python 3.11+: they create/update .venv and install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
STAMP_BENCH := $(VENV)/.installed-bench
STAMP_SPARK := $(VENV)/.installed-spark

.PHONY: run test test-all bench demo java etcd chromium cluster clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The native record scanner and metrics histogram are compiled by the install: rebuild when
# their sources change.
NATIVE_SRC := src/odradek/records/_scan.c src/odradek/observability/_hist.c

$(STAMP_RUN): pyproject.toml $(NATIVE_SRC) | $(PY)
	$(PIP) install --quiet -e .
	touch $@

$(STAMP_DEV): pyproject.toml $(NATIVE_SRC) | $(PY)
	$(PIP) install --quiet -e '.[dev]'
	touch $@ $(STAMP_RUN)

$(STAMP_BENCH): pyproject.toml $(NATIVE_SRC) | $(PY)
	$(PIP) install --quiet -e '.[bench]'
	touch $@

$(STAMP_SPARK): pyproject.toml $(NATIVE_SRC) | $(PY)
	$(PIP) install --quiet -e '.[spark]'
	touch $@ $(STAMP_RUN)

# kcat comes from Debian's packages; install it when missing (we run as root on these machines).
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kcat >/dev/null; }

# A cluster's metadata lives in etcd: Debian's etcd-server (3.4) when there is none.
etcd:
	@command -v etcd >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq etcd-server >/dev/null; }

# The console's browser tests drive Debian's chromium with Playwright (never Playwright's own download).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# PySpark needs a Java 17+ runtime: Debian's default-jre-headless (OpenJDK 17 on bookworm) when there is none.
java:
	@command -v java >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq default-jre-headless >/dev/null; }

run: $(STAMP_RUN)
	$(VENV)/bin/odradek broker --data-dir ./data --listen 127.0.0.1:9092

# A local three-broker cluster (etcd + brokers on racks a, b, c); Ctrl-C stops it.
cluster: $(STAMP_RUN) etcd
	$(VENV)/bin/odradek cluster up --brokers 3 --racks a,b,c --data-dir ./cluster-data

test: $(STAMP_DEV) kcat java etcd chromium
	$(VENV)/bin/pytest -q

# Everything, slow tests included.
test-all: $(STAMP_DEV) kcat java etcd chromium
	$(VENV)/bin/pytest -q -m ''

bench: $(STAMP_BENCH) $(STAMP_SPARK) java
	$(PY) bench/throughput.py
	$(PY) bench/client.py --records 1000000
	$(PY) bench/assignors.py
	$(PY) bench/coordinator.py
	$(PY) bench/rebalance.py
	$(PY) bench/spark.py
	$(PY) bench/security.py
	$(PY) bench/metrics.py

# The Spark streaming demo: an embedded broker, 30 s of clicks at 2000/s, windowed page counts to
# Parquet (./pipeline-output) and to topic page-counts, then a summary (see `odradek pipeline demo -h`).
demo: $(STAMP_SPARK) java
	$(VENV)/bin/odradek pipeline demo

clean:
	rm -rf $(VENV) data .pytest_cache
