# `make run`: set up and run jobsweb (web + worker); `make test`: set up and run the tests;
# `make bench`: the benchmark suite on the embedded and the stock (Debian, JIT on) PostgreSQL, written to
# docs/BENCHMARKS.md, whose sections after the suite's own are kept (`make bench-quick`: small sizes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# What each target installs into .venv, one stamp file each: `make run` only what running needs
# (the embedded and server extras), `make test` the dev and bench extras beside them (the quick
# benchmark is one of the tests), `make bench` the bench extra. Each adds to what is there: uv
# skips what is already installed, so `make test` after `make run` installs only the extras (and
# jobsweb's editable install again): 6 s here, beside 12 s for make run's venv and install.
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench
# The browser tests drive Debian's Chromium through Playwright (never a downloaded browser).
CHROMIUM := /usr/bin/chromium
# The crontab-mode test drives Debian's real cron daemon.
CRON := /usr/sbin/cron
# The pooler test puts Debian's real PgBouncer (transaction mode) in front of the test server.
PGBOUNCER := /usr/sbin/pgbouncer
# The tests that claim, finish, materialise or migrate also run on Debian's stock PostgreSQL 15
# (JIT on, its shipped configuration): tests/servers.py starts a throwaway cluster of it.
POSTGRES_STOCK := /usr/lib/postgresql/15/bin/postgres
# Each pytest run's whole output, printed at the end of `make test`.
TEST_LOGS := .cache/test-logs
# The accessibility checks inject axe-core (from the npm registry, never committed) into each page.
NPM := /usr/bin/npm
AXE := .cache/axe/node_modules/axe-core/axe.min.js
# The oldest versions jobsweb supports (pyproject.toml's lower bounds), with what a typical host
# pins beside them (examples/requirements-oldest.txt): tests/test_oldest_pins.py runs the example
# host app's tests with this venv's python, as separate processes.
OLDEST_VENV := .cache/venv-oldest
OLDEST_PINS := examples/requirements-oldest.txt
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test check test-model drills bench bench-quick schema
# make run PORT=5001: another port than 5000 (taken by AirPlay Receiver on macOS, for one).
run: $(RUN_STAMP)
	$(BIN)/flask --app wsgi dev$(if $(PORT), --port $(PORT))

# Seven pytest processes at once, each starting its own server (tests/servers.py):
# - stock-both and embedded-both: the tests marked both_servers (tests/conftest.py, ON_BOTH_SERVERS)
#   on the stock server and on the embedded one, but the lifecycle model (MODEL);
# - stock-model: the lifecycle model on the stock server (its embedded run is in embedded-cron): at
#   about 100 s a server it was the longest test of the two runs above, which ended last;
# - embedded-own-servers: the tests that start servers of their own to stop them or break the path
#   to them (OWN_SERVERS), mostly waiting out timeouts and backoff steps;
# - embedded-cron: crontab mode, which waits for cron's minute boundaries (about four minutes asleep),
#   and beside it the wheel, the oldest pins (BESIDE_CRON) and the lifecycle model;
# - embedded-slow: the other tests marked slow (the quick benchmark, its two servers at once, the
#   CLI outages, the docs' shell sessions, the buildpack);
# - embedded-rest: all the others.
# So every test runs on the embedded server and the both_servers ones on the stock server too.
# Most tests wait on worker processes, timeouts and clocks rather than compute (the workers are
# forks of one process that imported jobsweb: tests/forkserver.py), so the runs that wait overlap
# the ones that compute. Logs go to files (interleaved progress dots would read as none of the
# runs) and are printed at the end, each with its closing line and its slowest tests, then the
# closing lines again. make test always starts its own servers: TEST_DATABASE_URL is for running
# pytest yourself.
PYTEST_RUNS := embedded-both embedded-rest embedded-own-servers embedded-slow embedded-cron stock-both stock-model
BESIDE_CRON := tests/test_cron.py tests/test_wheel.py tests/test_oldest_pins.py
MODEL := tests/test_lifecycle_model.py
test: $(STAMP) $(OLDEST_VENV)/.installed $(CHROMIUM) $(CRON) $(PGBOUNCER) $(POSTGRES_STOCK) $(AXE)
	$(BIN)/ruff check .
	@mkdir -p $(TEST_LOGS)
	@rm -f $(TEST_LOGS)/*.exit
	@echo "pytest, seven runs at once: $(foreach run,$(PYTEST_RUNS),$(TEST_LOGS)/$(run).log)"
	@pytest="env -u TEST_DATABASE_URL $(BIN)/pytest -p no:cacheprovider --durations=15"; \
	run() { name=$$1; shift; TEST_SERVER=$${name%%-*} $$pytest "$$@" >$(TEST_LOGS)/$$name.log 2>&1; \
		echo $$? >$(TEST_LOGS)/$$name.exit; }; \
	run stock-both -m both_servers --ignore=$(MODEL) & \
	run embedded-both -m both_servers --ignore=$(MODEL) & \
	run stock-model $(MODEL) & \
	run embedded-own-servers -m "own_servers and not both_servers and not slow" & \
	run embedded-cron -m "slow or both_servers" $(BESIDE_CRON) $(MODEL) & \
	run embedded-slow -m "slow and not both_servers" $(addprefix --ignore=,$(BESIDE_CRON)) & \
	run embedded-rest -m "not both_servers and not slow and not own_servers" & \
	wait; \
	for run in $(PYTEST_RUNS); do echo "======== $$run: pytest log ========"; cat $(TEST_LOGS)/$$run.log; done; \
	failed=0; for run in $(PYTEST_RUNS); do code=$$(cat $(TEST_LOGS)/$$run.exit); \
		echo "$$run (exit $$code): $$(tail -n 1 $(TEST_LOGS)/$$run.log)"; [ "$$code" = 0 ] || failed=1; done; \
	[ $$failed = 0 ]

# A contributor's quick loop: ruff, then the tests that run in the pytest process alone (marked
# quick by tests/conftest.py: no browser, worker or other process, nothing slow, no servers of their
# own), on the embedded server: about a thousand tests in 2-3 minutes here, where make test takes 15.
# Before a commit that touches the worker, the pages or the packaging, make test.
check: $(STAMP)
	$(BIN)/ruff check .
	env -u TEST_DATABASE_URL TEST_SERVER=embedded $(BIN)/pytest -p no:cacheprovider -q -m quick

# The model test of the run lifecycle at length (docs/RELIABILITY.md): new random examples at each
# run, on the embedded server; `make test` runs 100 fixed ones on each server.
# make test-model EXAMPLES=20000
test-model: $(STAMP)
	TEST_MODEL_EXAMPLES=$(or $(EXAMPLES),5000) TEST_MODEL_RANDOM=1 TEST_SERVER=embedded \
		env -u TEST_DATABASE_URL $(BIN)/pytest -p no:cacheprovider -q tests/test_lifecycle_model.py

# The reliability drills at full size, printing their figures (docs/RELIABILITY.md).
# make drills DRILLS="chaos storm" DRILL_ARGS="--chaos-jobs 5000"
drills: $(STAMP)
	$(BIN)/python drills/run.py $(DRILLS) $(DRILL_ARGS)

# jobsweb/schema.sql, the schema at the head revision as pg_dump writes it after a fresh migrate on
# a throwaway embedded server (tests/schema_dump.py): after adding or changing a migration, run it
# and commit the file with the migration; tests/test_schema_file.py fails until they agree.
schema: $(RUN_STAMP)
	$(BIN)/python -m tests.schema_dump

# Then the first start (bench/first_start.py): `make run` timed in fresh clones, its section added to
# the report.
bench: $(BENCH_STAMP) $(POSTGRES_STOCK)
	$(BIN)/python -m bench
	$(BIN)/python -m bench.first_start --write docs/BENCHMARKS.md

bench-quick: $(BENCH_STAMP) $(POSTGRES_STOCK)
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

$(POSTGRES_STOCK):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null

$(NPM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq npm >/dev/null

$(AXE): | $(NPM)
	$(NPM) install --silent --no-save --no-audit --no-fund --prefix .cache/axe axe-core@4

# jobsweb from this checkout (editable, so the tests see the code as it is now), on the oldest versions.
$(OLDEST_VENV)/.installed: pyproject.toml $(OLDEST_PINS)
	rm -rf $(OLDEST_VENV)
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/pip install --quiet -e . -r $(OLDEST_PINS)
	touch $@

# The venv, with uv in it (from PyPI, by pip): uv installs jobsweb and its extras in a few
# seconds, where pip alone took 25 to 50 (it asks the index about one package at a time, then
# byte-compiles everything): most of make run's first start. The venv keeps its pip.
$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet 'uv>=0.5'
UV_INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python

# The dev and bench extras include the embedded and server ones: the run stamp is then true too.
$(RUN_STAMP): pyproject.toml | $(BIN)/uv
	$(UV_INSTALL) -e '.[embedded,server]'
	touch $@

$(STAMP): pyproject.toml | $(BIN)/uv
	$(UV_INSTALL) -e '.[dev,bench]'
	touch $@ $(RUN_STAMP)

$(BENCH_STAMP): pyproject.toml | $(BIN)/uv
	$(UV_INSTALL) -e '.[embedded,server,bench]'
	touch $@ $(RUN_STAMP)

# requirements.txt is what a Python buildpack installs from (`pip install -r requirements.txt`,
# docs/DEPLOY.md): jobsweb's dependencies and the server extra, each pinned with its hashes, resolved
# by uv from pyproject.toml for Linux and .python-version's Python. jobsweb itself is no line of
# it: pip checks the hashes of every line or of none, and a directory has none; the platform runs
# jobsweb from the app's directory. `make lock` keeps the pins it can; `make lock UPGRADE=1` takes
# the newest versions pyproject.toml allows.
.PHONY: lock
lock: | $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml --extra server --generate-hashes \
		--python-version $$(cat .python-version) --python-platform x86_64-manylinux_2_28 \
		--custom-compile-command "make lock" --quiet $(if $(UPGRADE),--upgrade) -o requirements.txt
