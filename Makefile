# errands: set-up, tests and the demo.  Everything runs inside ./.venv.
#
#   make demo    run the demo (SQLite; needs nothing but python3); installs errands with the
#                dashboard extra only, not the development tools
#   make test    run the test suite (PostgreSQL and MariaDB suites are skipped
#                with a message when those servers are down, unless CI=true);
#                ERRANDS_TEST_TIME_SCALE=3 make test multiplies every time limit
#                of the tests by 3 (default 1), for a slow or busy machine; the
#                tests run in parallel, one process per core (TEST_WORKERS=0: not)
#   make docs    build the documentation site into site/ (mkdocs, strict)
#   make dist    build the wheel and the sdist into dist/ (python -m build, from the files git tracks)
#   make check   lint, type-check and check the layers (ruff, mypy, import-linter); .ci/run runs it
#   make graph   redraw the import graph in docs/architecture.md from the code
#   make clean   remove both venvs, the demo's output, the built docs and test artefacts
#                (make test writes screenshots of every dashboard page to test-artifacts/screenshots/)

PYTHON ?= python3
VENV = .venv
VENV_PYTHON = $(VENV)/bin/python
STAMP = $(VENV)/.installed
# The demo needs errands and its dashboard extra only (DEMO_EXTRAS); the tests, the docs and the checks need
# .[dev].  One venv, two stamps: the dev install implies the demo's (it touches both), so `make test` then
# `make demo` installs nothing, and `make demo` then `make test` adds the development tools to the same venv.
DEMO_EXTRAS = dashboard
DEMO_STAMP = $(VENV)/.installed-demo
PYTEST_ARGS ?=
# Test processes (pytest-xdist): one more than the cores, as the tests spend much of their time waiting on
# worker processes they start and on the databases (on 2 cores the main suite took 15 min 34 s with 2 and
# 12 min 55 s with 3, 12 % of the CPU still idle); TEST_WORKERS=0 runs the tests in pytest's own process.
# Each test has its own database, schema and ports; the modules that share a costly module-scoped server
# or build stay on one worker (--dist loadgroup, with tests/conftest.py's ONE_WORKER_MODULES).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

.PHONY: venv demo-venv test demo demo-tour docs check graph clean dist

venv: $(STAMP)

# Create the venv if missing; re-install only when pyproject.toml is newer than
# the last successful install (the stamp lives inside .venv, so a new venv always installs).
$(STAMP): pyproject.toml
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --disable-pip-version-check -q -e '.[dev]'
	touch $(DEMO_STAMP) $(STAMP)

# The demo's install: skipped when the dev install above is up to date (it holds the demo's extras).
demo-venv: $(DEMO_STAMP)
$(DEMO_STAMP): pyproject.toml
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	test $(STAMP) -nt pyproject.toml || \
		$(VENV_PYTHON) -m pip install --disable-pip-version-check -q -e '.[$(DEMO_EXTRAS)]'
	touch $(DEMO_STAMP)

# The browser tests drive Debian's Chromium (never a browser Playwright downloads itself).
CHROMIUM = /usr/bin/chromium
$(CHROMIUM):
	command -v apt-get >/dev/null && (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null)) || \
		echo "could not install chromium: the browser tests will be skipped"

# The connection-pooler tests run a private PgBouncer (Debian's package) in front of the local PostgreSQL.
PGBOUNCER = /usr/sbin/pgbouncer
$(PGBOUNCER):
	command -v apt-get >/dev/null && (apt-get install -y -q pgbouncer >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q pgbouncer >/dev/null)) || \
		echo "could not install pgbouncer: the connection-pooler tests will be skipped"

# The Galera tests run a private three-node MariaDB Galera Cluster (Debian's galera-4; rsync for its state transfers).
# The dashboard load benchmark drives the pages with ApacheBench (Debian's apache2-utils).
AB = /usr/bin/ab
$(AB):
	command -v apt-get >/dev/null && (apt-get install -y -q apache2-utils >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q apache2-utils >/dev/null)) || \
		echo "could not install apache2-utils: bench/dashboard_load.py will say how to install ab"

GALERA = /usr/lib/galera/libgalera_smm.so
$(GALERA):
	command -v apt-get >/dev/null && (apt-get install -y -q galera-4 rsync >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q galera-4 rsync >/dev/null)) || \
		echo "could not install galera-4: the Galera cluster tests will be skipped"

# The main suite, then the Django 6 suite (below) even if the first failed; either failing fails `make test`.
test: venv $(CHROMIUM) $(PGBOUNCER) $(GALERA)
	@status=0; $(VENV_PYTHON) -m pytest $(XDIST) $(PYTEST_ARGS) || status=$$?; \
		$(MAKE) --no-print-directory test-django6 || status=1; exit $$status

# What users install until errands is on PyPI: a wheel and an sdist, built in an isolated environment
# from a copy of the files git tracks (so a stray local file never ships).
dist: venv
	rm -rf dist && tree=$$(mktemp -d) && git ls-files -z | xargs -0 -I{} cp --parents {} $$tree 2>/dev/null; \
		$(VENV_PYTHON) -m build --outdir dist $$tree >/dev/null && rm -rf $$tree && ls dist

# The worker and the dashboard on SQLite with sample jobs flowing, until Ctrl+C.
demo: demo-venv
	$(VENV_PYTHON) examples/demo/live_demo.py

# The older ten-second tour: enqueue, drain with --burst, print what happened.
demo-tour: demo-venv
	$(VENV_PYTHON) examples/demo/run_demo.py

# The documentation site (mkdocs.yml) into site/; --strict turns every warning into a failure.
docs: venv
	$(VENV_PYTHON) -m mkdocs build --strict --site-dir site

check: venv
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

# Redraw the import graph in docs/architecture.md from the code (a test fails when it is out of date).
graph: venv
	$(VENV_PYTHON) scripts/import_graph.py

clean:
	rm -rf $(VENV) .venv-django6 demo-output site test-artifacts dist

# make bench [QUICK=1]: errands against PgQueuer, procrastinate, Huey, dramatiq, Celery and bare-SQL loops
# (bench/run.py, docs/performance.md), then the backlog benchmark (bench/backlog.py, docs/scaling.md "Big
# backlogs") at issue 13's sizes: 10,000, 1,000,000 and 10,000,000 waiting jobs on PostgreSQL, 1,000,000 on
# SQLite and MariaDB, and the 10,000,000-job table drained whole (some 12 minutes more; SIZES= and
# BACKLOG_ARGS= as for bench-backlog), then fairness between tenants (bench/fairness.py, docs/performance.md),
# then claims under a pinned snapshot (bench/pinned_snapshot.py, docs/performance.md; 10 minutes, QUICK=1: 2), then
# the dashboard under 64 concurrent connections (bench/dashboard_load.py, ApacheBench).
# QUICK=1: all at small sizes, a few minutes in all.
# The peers go into their own venv, bench/.venv-peers, never into .venv.
.PHONY: bench
BENCH_ARGS ?=
BACKLOG_ARGS ?=
SIZES ?= postgres:10000,1000000,10000000,sqlite:1000000,mariadb:1000000
QUICK_SIZES = postgres:2000,20000,sqlite:20000,mariadb:20000
QUICK_BACKLOG_ARGS = --drain 2000 --samples 50 --enqueues 200
bench: venv $(AB)
	$(VENV_PYTHON) bench/run.py $(if $(filter-out 0,$(QUICK)),--quick) $(BENCH_ARGS)
	$(VENV_PYTHON) bench/costs.py --peers $(if $(filter-out 0,$(QUICK)),--jobs 5000 --reps 1)
	$(VENV_PYTHON) bench/limits.py
	$(VENV_PYTHON) bench/backlog.py $(if $(filter-out 0,$(QUICK)),--sizes $(QUICK_SIZES) $(QUICK_BACKLOG_ARGS),\
		--sizes $(SIZES)) $(BACKLOG_ARGS)
	$(VENV_PYTHON) bench/fairness.py $(if $(filter-out 0,$(QUICK)),--quick)
	$(VENV_PYTHON) bench/run_logs.py $(if $(filter-out 0,$(QUICK)),--quick)
	$(VENV_PYTHON) bench/pinned_snapshot.py $(if $(filter-out 0,$(QUICK)),--minutes 2)
	$(VENV_PYTHON) bench/dashboard_load.py $(if $(filter-out 0,$(QUICK)),--jobs 100000 --seconds 10 --rounds 1)

# make bench-fairness [BENCH_ARGS="--backends postgres --rounds 5 --src base=/tmp/base/src"]: one tenant's 10,000
# waiting jobs and ten tenants' 10 under `errands worker -c 8` (at which of the big tenant's starts the small tenants'
# last job starts, fairness on and off, every backend), and the claim with fairness on vs off at 1,000,000 waiting
# jobs on PostgreSQL (bench/fairness.py, docs/performance.md); part of `make bench`.
.PHONY: bench-fairness
bench-fairness: venv
	$(VENV_PYTHON) bench/fairness.py $(BENCH_ARGS)

# make bench-dashboard-load [BENCH_ARGS="--backend sqlite --rounds 3 --src base=/tmp/base/src --src this=src"]: / and
# /jobs under 64 concurrent connections (ApacheBench, a logged-in session, a live worker) on PostgreSQL with 1,000,000
# jobs (bench/dashboard_load.py, docs/performance.md); part of `make bench`.
.PHONY: bench-dashboard-load
bench-dashboard-load: venv $(AB)
	$(VENV_PYTHON) bench/dashboard_load.py $(BENCH_ARGS)

# make bench-pinned [BENCH_ARGS="--minutes 2 --src base=/path/to/other/src --src this=src"]: 1,000 jobs/s while another
# session sits idle in a transaction holding a snapshot (bench/pinned_snapshot.py, docs/performance.md); part of `make bench`.
.PHONY: bench-pinned
bench-pinned: venv
	$(VENV_PYTHON) bench/pinned_snapshot.py $(BENCH_ARGS)

# make bench-limits [BENCH_ARGS="--backends sqlite --reps 3 --src base=/tmp/base/src --src this=src"]: concurrency
# groups (average active runs / limit while work waits) and rate limits (runs per second / allowed) with real
# `errands worker -p 3 -c 8` processes on every backend (bench/limits.py, docs/performance.md); part of `make bench`.
.PHONY: bench-limits
bench-limits: venv
	$(VENV_PYTHON) bench/limits.py $(BENCH_ARGS)

# make bench-dashboard [BACKEND=postgres|mariadb|sqlite] [JOBS=1000000] [DEAD=100000]: fills a scratch database
# and times every dashboard page over HTTP (docs/performance.md, "Dashboard with 1,000,000 jobs").
.PHONY: bench-dashboard bench-ab
BACKEND ?= postgres
JOBS ?= 1000000
DEAD ?= 100000
bench-dashboard: venv
	$(VENV_PYTHON) bench/dashboard_pages.py --backend $(BACKEND) --jobs $(JOBS) --dead $(DEAD) $(BENCH_ARGS)

# make bench-backlog [SIZES=postgres:10000,1000000,10000000,sqlite:1000000,mariadb:1000000]: with N jobs waiting,
# the drain rate, the pickup latency on another queue, single enqueues and the dashboard's reads; then the
# largest PostgreSQL table drained whole and its size and dead tuples (docs/scaling.md, "Big backlogs").
# About 12 minutes at the default sizes; BENCH_ARGS=--no-bloat skips the full drain.
.PHONY: bench-backlog
bench-backlog: venv
	$(VENV_PYTHON) bench/backlog.py --sizes $(SIZES) $(BENCH_ARGS)

# make bench-ab BASE=/path/to/other/checkout [ROUNDS=8]: this checkout against another one (its own .venv),
# run A B / B A on fresh databases; ratios of the medians, written to bench/results/ab-<stamp>.md.
ROUNDS ?= 8
bench-ab: venv
	$(VENV_PYTHON) bench/ab.py --base $(BASE) --rounds $(ROUNDS) $(BENCH_ARGS)

# ---- Django 6 -------------------------------------------------------------------------------
# Django 6 needs Python >= 3.12 and .venv may be older, so `make test` also runs tests/django in a
# second venv, .venv-django6, holding errands and only what those tests need.  Without a Python
# >= 3.12 (python3.12 on PATH, or pyenv's) the run is skipped with a message; DJANGO6=0 skips it.
.PHONY: test-django6
DJANGO6 ?= 1
DJANGO6_VENV = .venv-django6
DJANGO6_PYTEST_ARGS ?=
DJANGO6_PYTHON ?= $(firstword $(foreach p,python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) \
	python3.13 $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13),\
	$(shell $(p) -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && echo $(p))))
test-django6:
ifeq ($(DJANGO6),0)
	@echo "make: the Django 6 tests are skipped (DJANGO6=0)"
else ifeq ($(DJANGO6_PYTHON),)
	@echo "make: the Django 6 tests are SKIPPED: no Python >= 3.12 found (python3.12 on PATH or under ~/.pyenv);" \
		"set DJANGO6_PYTHON=/path/to/python3.12 to run them"
else
	test -x $(DJANGO6_VENV)/bin/python || $(DJANGO6_PYTHON) -m venv $(DJANGO6_VENV)
	test $(DJANGO6_VENV)/.installed -nt pyproject.toml || ($(DJANGO6_VENV)/bin/python -m pip install \
		--disable-pip-version-check -q -e '.[postgres,mysql,dashboard,django]' 'django>=6' 'pytest>=8' \
		'pytest-timeout>=2.3' 'pytest-xdist>=3.5' && touch $(DJANGO6_VENV)/.installed)
	$(DJANGO6_VENV)/bin/python -m pytest $(XDIST) tests/django $(DJANGO6_PYTEST_ARGS)
endif
