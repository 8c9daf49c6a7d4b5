# binlake: the two quickstart commands are `make demo` and `make test`.
# Each does its own setup on a fresh machine: venv, MariaDB package, Delta jars.
SHELL := /bin/bash
PY := .venv/bin/python
STAMP := .venv/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: lint setup venv mariadb-package sysbench-package percona-toolkit-package browser-package spark-jars mysql-up mysql-down demo gates-and-spark test test-fast test-unit bench bench-large chaos chaos-short clean

PACKAGES := mariadb-package sysbench-package percona-toolkit-package browser-package
setup: venv $(PACKAGES) spark-jars

venv: $(STAMP)
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[local,test]'
	@rm -f .venv/.installed-*; touch $@

mariadb-package:
	@if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then \
	  echo "installing mariadb-server (Debian package)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq mariadb-server mariadb-client >/dev/null; \
	fi

# The OLTP write load of tests/integration/test_oltp_load.py.
sysbench-package:
	@if ! command -v sysbench >/dev/null; then \
	  echo "installing sysbench (Debian package)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq sysbench >/dev/null; \
	fi

# The real pt-online-schema-change of tests/integration/test_online_schema_change.py.
percona-toolkit-package:
	@if ! command -v pt-online-schema-change >/dev/null; then \
	  echo "installing percona-toolkit (Debian package)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq percona-toolkit >/dev/null; \
	fi

# The headless browser tests/integration/test_metrics.py renders `status --html` in.
browser-package:
	@if ! command -v chromium >/dev/null; then \
	  echo "installing chromium (Debian package, headless rendering test)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; \
	fi

# The first Spark start resolves the Delta jars from Maven Central into ~/.ivy2*; do it
# once here so parallel test sessions never race for the cache. It also writes the class
# archive every later local Spark JVM starts from (~/.cache/binlake, once per JDK/Spark).
spark-jars: $(STAMP)
	@$(PY) -m binlake.devtools.warm

mysql-up: venv mariadb-package
	@$(PY) -m binlake.devtools.mariadb up --dir .local/mariadb

mysql-down:
	@test -x $(PY) && $(PY) -m binlake.devtools.mariadb down --dir .local/mariadb || true

demo: setup mysql-up
	$(PY) -m binlake.devtools.demo --mariadb-dir .local/mariadb --workdir .local/demo

# The gates: ruff's lint rules and format check, mypy on all of src/binlake,
# import-linter's layer contract (pyproject.toml configures each).
lint: venv
	.venv/bin/ruff check src tests benchmarks
	.venv/bin/ruff format --check src tests benchmarks
	.venv/bin/mypy
	.venv/bin/lint-imports

# What both test targets need first: the gates and the Spark warm-up, side by side. Neither
# needs the other, so they share the two cores instead of waiting in turn.
gates-and-spark: venv
	@$(MAKE) --no-print-directory -j2 --output-sync=target spark-jars lint

# The whole suite, including the chaos short form (tests/integration/test_chaos_short.py).
# Two workers, whole files each (one Spark and one MariaDB per worker): the suite keeps two
# cores busy with two, and a third JVM on them only adds contention (docs/development.md).
PYTEST_WORKERS ?= 2
test: venv $(PACKAGES) gates-and-spark
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# The edit loop: the unit tests and the Spark tests that need no MariaDB and are not `slow`.
# Membership is by marker: `integration` is tests/integration plus any test that asks for the
# mariadb fixture (tests/conftest.py); `slow` marks the ones over about 15 s, left to `make test`.
test-fast: gates-and-spark
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not integration and not slow" --durations=10 $(PYTEST_ARGS)

test-unit: venv
	$(PY) -m pytest tests/unit -q

bench: setup
	$(PY) -m benchmarks.run

# The large sizes too: lineitem SF1 (6M rows) against a warm SF0.1 sync (full_sync_scaling)
# and against its own plain reload (full_sync_vs_reload_sf1).
bench-large: setup
	$(PY) -m benchmarks.run --large --only full_sync

chaos: setup
	$(PY) tests/chaos/driver.py --full

chaos-short: setup
	$(PY) -m pytest -m chaos $(PYTEST_ARGS)

clean: mysql-down
	rm -rf .local .venv
