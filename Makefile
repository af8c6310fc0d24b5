# `make demo`, `make check` and `make test` bootstrap their venvs themselves on a machine with
# Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The core alone with the test tools (the test dependency group), where make check runs the
# core's unit tests: a core test that needs an adapter, a queue library or a store's driver
# fails there, instead of passing on what .venv happens to hold.
CORE   := .venv-core
CORE_STAMP := $(CORE)/.installed
PYTHON_311 := $(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cron-bridge needs Python 3.11 or newer")'
# The lowest Celery the Celery adapter declares, for the celery beat twin test, with a kombu
# from before 5.7 (no publish batch: the adapter sends each message on its own there).
CELERY_FLOOR := 5.3.0
KOMBU_FLOOR := 5.3
FLOOR  := .venv-celery-floor
FLOOR_STAMP := $(FLOOR)/.installed-$(CELERY_FLOOR)-$(KOMBU_FLOOR)
# The lowest RQ and Dramatiq their adapters declare, for their end-to-end tests (the tests
# check these are the declared floors); .venv has the newest. rq-scheduler lives here too,
# for the jobs `cron-bridge import rq-scheduler` reads: it brings the `crontab` module, which
# takes the place of python-crontab's that django-celery-beat imports in .venv.
RQ_FLOOR := 2.8.0
DRAMATIQ_FLOOR := 1.17.1
QUEUE_FLOOR := .venv-queue-floor
QUEUE_FLOOR_STAMP := $(QUEUE_FLOOR)/.installed-$(RQ_FLOOR)-$(DRAMATIQ_FLOOR)-rq-scheduler

.PHONY: demo check test lint typecheck unit docs pytest bench chaos screenshots dists clean

# make demo installs what the demo runs (the core and the Celery adapter); make test adds the
# development group (pip install --group dev: test, lint and docs tools, never published) and
# the other adapters and extras.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml adapters/celery/pyproject.toml
	$(PYTHON_311)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e . -e adapters/celery
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP) pyproject.toml adapters/celery/pyproject.toml adapters/rq/pyproject.toml adapters/dramatiq/pyproject.toml
	$(BIN)/python -m pip install --quiet --group dev -e ".[redis,postgres,nats,otel,metrics]" \
		-e "adapters/celery[redis,django]" -e adapters/rq -e adapters/dramatiq
	touch $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/cron-bridge demo

$(CORE_STAMP): pyproject.toml
	$(PYTHON_311)
	test -x $(CORE)/bin/python || $(PYTHON) -m venv $(CORE)
	$(CORE)/bin/python -m pip install --quiet --upgrade pip
	$(CORE)/bin/python -m pip install --quiet --group test -e .
	touch $(CORE_STAMP)

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

$(FLOOR_STAMP): $(STAMP) adapters/celery/pyproject.toml
	test -x $(FLOOR)/bin/python || $(PYTHON) -m venv $(FLOOR)
	$(FLOOR)/bin/python -m pip install --quiet --upgrade pip
	$(FLOOR)/bin/python -m pip install --quiet "celery[redis]==$(CELERY_FLOOR)" ephem \
		-e ".[redis]" -e adapters/celery "celery==$(CELERY_FLOOR)" "kombu==$(KOMBU_FLOOR).*"
	touch $(FLOOR_STAMP)

$(QUEUE_FLOOR_STAMP): $(STAMP) adapters/rq/pyproject.toml adapters/dramatiq/pyproject.toml
	test -x $(QUEUE_FLOOR)/bin/python || $(PYTHON) -m venv $(QUEUE_FLOOR)
	$(QUEUE_FLOOR)/bin/python -m pip install --quiet --upgrade pip
	$(QUEUE_FLOOR)/bin/python -m pip install --quiet "rq==$(RQ_FLOOR)" \
		"dramatiq[redis,rabbitmq]==$(DRAMATIQ_FLOOR)" psutil -e ".[redis]" -e adapters/rq \
		-e adapters/dramatiq rq-scheduler
	touch $(QUEUE_FLOOR_STAMP)

# The core's unit tests (marker `unit`, which tests/conftest.py gives every test under tests/
# but the end-to-end ones and those marked slow, alone, extras or with the server they need),
# in .venv-core. A file whose every test needs more than the core (its pytestmark says extras
# or a server) imports what .venv-core does not have, so it is not even collected there.
# PYTHONPATH is dropped, so that nothing but the core can be imported whatever it says.
NOT_CORE = $(sort $(shell grep -lrE --exclude-dir=e2e '^pytestmark = .*\bpytest\.mark\.(extras|redis|postgres|nats)\b' tests))
UNIT_WORKERS ?= 2
unit: $(CORE_STAMP)
	env -u PYTHONPATH $(CORE)/bin/python -m pytest -n $(UNIT_WORKERS) -m unit tests \
		--ignore=tests/e2e $(addprefix --ignore=,$(NOT_CORE))

# The fast loop, under 2 minutes: lint, types and the core's unit tests.
check: lint typecheck unit

# Every test make check did not run (-m "not unit": the adapters' tests, the core's that need
# an adapter, a library or a server, the end-to-end tests), with everything installed. The
# end-to-end tests mostly wait on sleeps and servers, so they run side by side (each pytest
# worker starts its own throwaway servers); the chaos run, which loads the machine on
# purpose, runs alone after them.
PYTEST_WORKERS ?= 3
pytest: $(STAMP) $(FLOOR_STAMP) $(QUEUE_FLOOR_STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "not alone and not unit"
	$(BIN)/python -m pytest -m alone

# make check first: a failure there stops the run within minutes.
test: check docs pytest

# Not part of `make test`: about 20 minutes; writes docs/benchmarks.md and bench/results.json.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -r bench/requirements.txt
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Not part of `make test`: a few minutes of kills, freezes and store restarts on loopback.
chaos: $(STAMP)
	$(BIN)/python -m chaos.run $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) $(CORE) $(FLOOR) $(QUEUE_FLOOR) .mypy_cache .ruff_cache .pytest_cache site dist
