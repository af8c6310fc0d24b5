# `make demo` and `make test` bootstrap .venv themselves on a machine with Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
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

.PHONY: demo test lint typecheck docs pytest bench chaos screenshots dists clean

# make demo installs what the demo runs (the core and the Celery adapter); make test adds the
# development group (pip install --group dev: test, lint and docs tools, never published) and
# the other adapters and extras.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml adapters/celery/pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cron-bridge needs Python 3.11 or newer")'
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

# The end-to-end tests mostly wait on sleeps and servers, so they run side by side (each
# pytest worker starts its own throwaway servers); the chaos run, which loads the machine on
# purpose, runs alone after them.
PYTEST_WORKERS ?= 3
pytest: $(STAMP) $(FLOOR_STAMP) $(QUEUE_FLOOR_STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "not alone"
	$(BIN)/python -m pytest -m alone

test: lint typecheck docs pytest

# Not part of `make test`: about 20 minutes; writes docs/benchmarks.md and bench/results.json.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -r bench/requirements.txt
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Not part of `make test`: a few minutes of kills, freezes and store restarts on loopback.
chaos: $(STAMP)
	$(BIN)/python -m chaos.run $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) $(FLOOR) $(QUEUE_FLOOR) .mypy_cache .ruff_cache .pytest_cache site dist
