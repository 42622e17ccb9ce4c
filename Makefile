# The two commands a newcomer needs are `make demo` and `make test`; both install what is missing.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-fast setup lint fmt freeze services-up services-down test-services-up test-services-down

demo: setup
	@scripts/demo.sh

# PYTEST_ARGS selects tests, e.g. make test PYTEST_ARGS='tests/tables/zk/test_store.py -k conflict'
test: setup
	@scripts/test.sh $(PYTEST_ARGS)

# The pure tests, with no service started: every test not marked as needing ZooKeeper, Redis,
# Spark, Celery, a browser, services of its own or the database. ZooKeeper and Redis are pointed at
# a closed port, so a test that needs one but lacks its marker fails here instead of quietly using
# a running one. PYTEST_ARGS as for `make test`.
FAST_MARKERS := not zk and not redis and not spark and not celery and not browser and not services and not django_db
test-fast: setup
	@TEST_ZK_PORT=1 TEST_REDIS_PORT=1 $(PY) -m pytest -m "$(FAST_MARKERS)" $(PYTEST_ARGS)

setup:
	@scripts/bootstrap.sh

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

fmt:
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Rebuild requirements.txt (the full pinned set) from requirements.in in a scratch venv.
freeze:
	rm -rf var/freeze-venv && python3 -m venv var/freeze-venv
	var/freeze-venv/bin/pip install -q --disable-pip-version-check -r requirements.in
	(echo "# Full pinned set: pip freeze of a venv built from requirements.in (Python 3.11). Regenerate with make freeze."; \
	 var/freeze-venv/bin/pip freeze --disable-pip-version-check) > requirements.txt
	rm -rf var/freeze-venv

services-up:
	@scripts/services.sh start
services-down:
	@scripts/services.sh stop

# The test services alone, to run single tests with `$(PY) -m pytest tests/...` in between.
test-services-up:
	@VAR_DIR=$(CURDIR)/var/test ZK_PORT=21811 REDIS_PORT=16380 scripts/services.sh start
test-services-down:
	@VAR_DIR=$(CURDIR)/var/test ZK_PORT=21811 REDIS_PORT=16380 scripts/services.sh stop
