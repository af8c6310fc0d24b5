# `make demo`, `make check` and `make test` bootstrap their venvs themselves on a machine with
# Python 3.11+ and make.
PYTHON ?= python3
PYTHON_311 := $(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cron-bridge needs Python 3.11 or newer")'

# Every venv installs exactly its lock, lock/<venv>.txt: every package pinned with its hashes,
# resolved once by `make lock` (lock/lock.py, docs/architecture.md), so a fresh clone installs
# what the developer tested. uv installs them (itself locked in lock/tools.txt, installed by pip
# with its hashes checked): `uv pip sync` checks each hash and removes what the lock does not
# hold; then the tree's own distributions go in, editable, without dependencies. A venv is
# synced again whenever its lock changes.
TOOLS  := .venv-tools
UV     := $(TOOLS)/bin/uv
TOOLS_STAMP := $(TOOLS)/.installed
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The core alone with the test tools (the test dependency group), where make check runs the
# core's unit tests: a core test that needs an adapter, a queue library or a store's driver
# fails there, instead of passing on what .venv happens to hold.
CORE   := .venv-core
CORE_STAMP := $(CORE)/.installed
# The lowest Celery the Celery adapter declares (5.3.0, lock/celery-floor.in), for the celery
# beat twin test, with a kombu from before 5.7 (no publish batch: the adapter sends each
# message on its own there).
FLOOR  := .venv-celery-floor
FLOOR_STAMP := $(FLOOR)/.installed
# The lowest RQ and Dramatiq their adapters declare (2.8.0 and 1.17.1, lock/queue-floor.in),
# for their end-to-end tests (the tests check these are the declared floors); .venv has the
# newest. rq-scheduler lives here too, for the jobs `cron-bridge import rq-scheduler` reads: it
# brings the `crontab` module, which takes the place of python-crontab's that
# django-celery-beat imports in .venv.
QUEUE_FLOOR := .venv-queue-floor
QUEUE_FLOOR_STAMP := $(QUEUE_FLOOR)/.installed
OWN_ALL := -e . -e adapters/celery -e adapters/rq -e adapters/dramatiq

.PHONY: demo check test lint typecheck unit docs pytest bench chaos screenshots dists clean \
	lock newest

$(TOOLS_STAMP): lock/tools.txt
	$(PYTHON_311)
	rm -rf $(TOOLS)
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes \
		--no-deps -r lock/tools.txt
	touch $@

# $(call sync,VENV,LOCK,DISTRIBUTIONS): VENV holds exactly lock/LOCK.txt, then the tree's
# DISTRIBUTIONS, editable and without dependencies (the lock has them).
define sync
	$(PYTHON_311)
	test -x $(1)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(1)
	$(UV) pip sync --quiet --require-hashes --python $(1)/bin/python lock/$(2).txt
	$(UV) pip install --quiet --no-deps --no-build-isolation --python $(1)/bin/python $(3)
	touch $@
endef

# make demo installs what the demo runs (the core and the Celery adapter, lock/demo.txt, on
# top of whatever .venv holds: its pins are dev's); make test makes .venv exactly lock/dev.txt
# (the dev dependency group: test, lint and docs tools, never published, every adapter and
# extra, and the benchmarks' peers).
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): $(TOOLS_STAMP) lock/demo.txt pyproject.toml adapters/celery/pyproject.toml
	$(PYTHON_311)
	test -x $(BIN)/python || $(UV) venv --quiet --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --require-hashes --python $(BIN)/python -r lock/demo.txt
	$(UV) pip install --quiet --no-deps --no-build-isolation --python $(BIN)/python \
		-e . -e adapters/celery
	touch $@

$(STAMP): $(TOOLS_STAMP) lock/dev.txt pyproject.toml adapters/celery/pyproject.toml \
		adapters/rq/pyproject.toml adapters/dramatiq/pyproject.toml
	$(call sync,$(VENV),dev,$(OWN_ALL))

demo: $(DEMO_STAMP)
	$(BIN)/cron-bridge demo

$(CORE_STAMP): $(TOOLS_STAMP) lock/core.txt pyproject.toml
	$(call sync,$(CORE),core,-e .)

# The four distributions (the core and the three adapters), sdist and wheel each, in dist/.
dists: $(STAMP)
	rm -rf dist
	for project in . adapters/celery adapters/rq adapters/dramatiq; do \
		$(BIN)/python -m build --quiet --outdir dist $$project || exit 1; done
	$(BIN)/python -m twine check --strict dist/*
	$(BIN)/check-wheel-contents dist/*.whl

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site; --strict fails on broken links and anchors and pages left out of the nav.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet --site-dir site

# The dashboard's pictures in docs/images (docs/observability.md shows them), taken in
# headless Chromium from three beats running tests/apps/scene_app.py; needs chromium on PATH.
screenshots: $(STAMP)
	$(BIN)/python -m tests.e2e.scene docs/images

$(FLOOR_STAMP): $(TOOLS_STAMP) lock/celery-floor.txt pyproject.toml adapters/celery/pyproject.toml
	$(call sync,$(FLOOR),celery-floor,-e . -e adapters/celery)

$(QUEUE_FLOOR_STAMP): $(TOOLS_STAMP) lock/queue-floor.txt pyproject.toml \
		adapters/rq/pyproject.toml adapters/dramatiq/pyproject.toml
	$(call sync,$(QUEUE_FLOOR),queue-floor,-e . -e adapters/rq -e adapters/dramatiq)

# The core's unit tests (marker `unit`, which tests/conftest.py gives every test under tests/
# but the end-to-end ones and those marked slow, alone, extras or with the server they need),
# in .venv-core. A file whose every test needs more than the core (its pytestmark says extras
# or a server) imports what .venv-core does not have, so it is not even collected there.
# PYTHONPATH is dropped, so that nothing but the core can be imported whatever it says.
NOT_CORE = $(sort $(shell grep -lrE --exclude-dir=e2e '^pytestmark = .*\bpytest\.mark\.(extras|redis|postgres|nats)\b' tests))
UNIT_WORKERS ?= 2
# Bytecode for the tree, written ahead: with PYTHONDONTWRITEBYTECODE set (as container images
# often have it) no import writes any, and each of the thousand processes the tests start
# (beats, workers, command lines) would compile cron-bridge from source again, some 50 ms of
# CPU each. compileall writes it whatever that says; imports read it either way.
unit: $(CORE_STAMP)
	$(CORE)/bin/python -m compileall -q -j 0 cron_bridge tests >/dev/null
	env -u PYTHONPATH $(CORE)/bin/python -m pytest -n $(UNIT_WORKERS) -m unit tests \
		--ignore=tests/e2e $(addprefix --ignore=,$(NOT_CORE))

# The fast loop, under 2 minutes: lint, types and the core's unit tests.
check: lint typecheck unit

# Every test make check did not run (-m "not unit": the adapters' tests, the core's that need
# an adapter, a library or a server, the end-to-end tests), with everything installed. The
# end-to-end tests mostly wait (on sleeps, servers and windows of wall time), so they run side
# by side, 3 at a time on 2 cores (each pytest worker starts its own throwaway servers; 6
# and 8 ran faster, 850 to 985 s, but timing-bound tests still failed now and then there;
# docs/architecture.md has the figures); --maxschedchunk=1 hands a worker its next test as it
# frees up, never a run of them in one go, so no worker is left at the end with a queue of
# slow tests while the others idle. The chaos runs, which load the machine on purpose, run
# alone after them, one at a time (three side by side judged a skewed replica's skips lost).
# --durations prints the slowest tests, so a run's log says where its minutes went.
PYTEST_WORKERS ?= 3
pytest: $(STAMP) $(FLOOR_STAMP) $(QUEUE_FLOOR_STAMP)
	$(BIN)/python -m compileall -q -j 0 cron_bridge adapters tests chaos >/dev/null
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --maxschedchunk=1 -m "not alone and not unit" \
		--durations=30
	$(BIN)/python -m pytest -m alone --durations=3

# make check first: a failure there stops the run within minutes.
test: check docs pytest

# Not part of `make test`: about 20 minutes; writes docs/benchmarks.md and bench/results.json.
bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Not part of `make test`: a few minutes of kills, freezes and store restarts on loopback.
chaos: $(STAMP)
	$(BIN)/python -m chaos.run $(CHAOS_ARGS)

# A refresh of the lock: every lock/*.txt resolved anew from lock/*.in, dev to the newest
# releases the ranges admit and the others under its pins. Commit it on its own, once make test
# passes on it (docs/architecture.md).
lock: $(TOOLS_STAMP)
	$(PYTHON) lock/lock.py compile $(UV)

# The newest releases tried on purpose, no lock: .venv-newest with the newest of everything
# the project declares, then lint, types and every adapter's end-to-end tests there; it prints
# which versions differ from lock/dev.txt and what failed.
newest: $(TOOLS_STAMP)
	$(PYTHON) lock/lock.py newest $(UV) --workers $(PYTEST_WORKERS)

clean:
	rm -rf $(TOOLS) $(VENV) $(CORE) $(FLOOR) $(QUEUE_FLOOR) .venv-newest .mypy_cache .ruff_cache .pytest_cache site dist
