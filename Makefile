# `make run`: set up and run jobsweb (web + worker); `make test`: set up and run the tests;
# `make bench`: the benchmark suite on the embedded and the stock (Debian, JIT on) PostgreSQL, written to
# docs/BENCHMARKS.md (`make bench-quick`: small sizes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The browser tests drive Debian's Chromium through Playwright (never a downloaded browser).
CHROMIUM := /usr/bin/chromium
# The crontab-mode test drives Debian's real cron daemon.
CRON := /usr/sbin/cron
# The pooler test puts Debian's real PgBouncer (transaction mode) in front of the test server.
PGBOUNCER := /usr/sbin/pgbouncer
# The stock server the tests and the benchmark also run on (tests/servers.py): Debian's PostgreSQL 15.
STOCK_PG := /usr/lib/postgresql/15/bin/postgres
# The accessibility checks inject axe-core (from the npm registry, never committed) into each page.
NPM := /usr/bin/npm
AXE := .cache/axe/node_modules/axe-core/axe.min.js
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test drills bench bench-quick
run: $(STAMP)
	$(BIN)/flask --app wsgi dev

test: $(STAMP) $(CHROMIUM) $(CRON) $(PGBOUNCER) $(AXE) $(STOCK_PG)
	$(BIN)/ruff check .
	$(BIN)/pytest

# The reliability drills at full size, printing their figures (docs/RELIABILITY.md).
# make drills DRILLS="chaos storm" DRILL_ARGS="--chaos-jobs 5000"
drills: $(STAMP)
	$(BIN)/python drills/run.py $(DRILLS) $(DRILL_ARGS)

bench: $(STAMP) $(STOCK_PG)
	$(BIN)/python -m bench

bench-quick: $(STAMP) $(STOCK_PG)
	$(BIN)/python -m bench --quick --out $(or $(OUT),/tmp/jobsweb-bench-quick)

$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null

$(CRON):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq cron >/dev/null

$(PGBOUNCER):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq pgbouncer >/dev/null

$(STOCK_PG):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql-15 >/dev/null

$(NPM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq npm >/dev/null

$(AXE): | $(NPM)
	$(NPM) install --silent --no-save --no-audit --no-fund --prefix .cache/axe axe-core@4

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)
