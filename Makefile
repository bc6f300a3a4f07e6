# errands: set-up, tests and the demo.  Everything runs inside ./.venv.
#
#   make demo    run the demo (SQLite; needs nothing but python3)
#   make test    run the test suite (PostgreSQL and MariaDB suites are skipped
#                with a message when those servers are down, unless CI=true)
#   make check   lint and type-check (ruff, mypy; installed into .venv on first use)
#   make clean   remove .venv and the demo's output

PYTHON ?= python3
VENV = .venv
VENV_PYTHON = $(VENV)/bin/python
STAMP = $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv test demo demo-tour check clean

venv: $(STAMP)

# Create the venv if missing; re-install only when pyproject.toml is newer than
# the last successful install (the stamp lives inside .venv, so a new venv always installs).
$(STAMP): pyproject.toml
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --disable-pip-version-check -q -e '.[dev]'
	touch $(STAMP)

# The browser tests drive Debian's Chromium (never a browser Playwright downloads itself).
CHROMIUM = /usr/bin/chromium
$(CHROMIUM):
	command -v apt-get >/dev/null && (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null)) || \
		echo "could not install chromium: the browser tests will be skipped"

test: venv $(CHROMIUM)
	$(VENV_PYTHON) -m pytest $(PYTEST_ARGS)

# The worker and the dashboard on SQLite with sample jobs flowing, until Ctrl+C.
demo: venv
	$(VENV_PYTHON) examples/demo/live_demo.py

# The older ten-second tour: enqueue, drain with --burst, print what happened.
demo-tour: venv
	$(VENV_PYTHON) examples/demo/run_demo.py

check: venv
	test -x $(VENV)/bin/ruff -a -x $(VENV)/bin/mypy || $(VENV_PYTHON) -m pip install --disable-pip-version-check -q ruff mypy
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy src

clean:
	rm -rf $(VENV) demo-output

# make bench [QUICK=1]: errands against PgQueuer, procrastinate, Huey, dramatiq, Celery and bare-SQL loops
# (docs/performance.md).  The peers go into their own venv, bench/.venv-peers, never into .venv.
.PHONY: bench
BENCH_ARGS ?=
bench: venv
	$(VENV_PYTHON) bench/run.py $(if $(filter-out 0,$(QUICK)),--quick) $(BENCH_ARGS)

# make bench-dashboard [BACKEND=postgres|mariadb|sqlite] [JOBS=1000000] [DEAD=100000]: fills a scratch database
# and times every dashboard page over HTTP (docs/performance.md, "Dashboard with 1,000,000 jobs").
.PHONY: bench-dashboard
BACKEND ?= postgres
JOBS ?= 1000000
DEAD ?= 100000
bench-dashboard: venv
	$(VENV_PYTHON) bench/dashboard_pages.py --backend $(BACKEND) --jobs $(JOBS) --dead $(DEAD) $(BENCH_ARGS)
