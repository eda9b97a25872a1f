# The two commands of the README: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# parallel test processes (pytest-xdist, each with a RabbitMQ node of its own; 0: one process). docs/reference/commands.md
TEST_PROCESSES ?= 3
# the developer set: runtime, test, docs and tools (requirements.txt includes each; the image installs runtime.txt only)
REQUIREMENTS := requirements.txt $(addprefix requirements/,runtime.txt test.txt docs.txt tools.txt)

.PHONY: venv run test test-fast lint lint-baseline test-upgrade test-rabbitmq4 test-reliability test-cluster test-cluster-rabbitmq4 cluster cluster-stop soak bench bench-profile bench-moves bench-admin bench-history bench-report bench-ordering-explain docs

$(BIN)/.installed: $(REQUIREMENTS)
	scripts/services.sh python-venv
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	touch $@

venv: $(BIN)/.installed

.env:
	scripts/make-env.sh

## run: install, start RabbitMQ and PostgreSQL, migrate, provision the cascades, serve web + worker
run: venv .env
	scripts/services.sh rabbitmq postgres platform-db java
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/python manage.py provision_delays --version all
	scripts/run.sh

## test: the whole suite against real RabbitMQ, PostgreSQL, Celery workers and headless Chromium,
## in TEST_PROCESSES parallel processes (pytest-xdist; each with its own vhost, database and workers)
test: venv
	scripts/services.sh rabbitmq postgres chromium java rabbitmq4-root docker-compose
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

## test-rabbitmq4: the broker-facing suite (broker tier, e2e, reduced faults, peers' failure modes) on RabbitMQ 4.0.5,
## each test process on a 4.0.5 node of its own (Debian 13's package in a chroot: scripts/rabbitmq4.sh)
test-rabbitmq4: venv
	scripts/services.sh rabbitmq postgres java rabbitmq4-root
	DP_TEST_RABBITMQ=4 $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder \
		tests/rabbit tests/topology tests/e2e tests/reliability -m "not cluster" $(PYTEST_ARGS)

## test-reliability: fault injection and fuzzing at full size (make test runs them reduced); prints the counts
test-reliability: venv
	scripts/services.sh rabbitmq postgres
	RELIABILITY_FULL=1 $(BIN)/python -m pytest tests/reliability -m "not cluster" -s -p no:randomly $(PYTEST_ARGS)

## test-upgrade: the previous release (pyproject.toml [tool.delayplatform.previous-release]) in a virtualenv of its own,
## under traffic, upgraded to this tree: migrate while it serves, then web, worker, beat (2-4 min; docs/operations/upgrades.md)
test-upgrade: venv
	scripts/services.sh rabbitmq postgres
	$(BIN)/python -m pytest tests/upgrade -m upgrade -s -p no:randomly $(PYTEST_ARGS)

## test-cluster: every cluster fault at full size on a three-node cluster of its own (~6 min); prints the counts
test-cluster: venv
	scripts/services.sh rabbitmq postgres
	RELIABILITY_FULL=1 $(BIN)/python -m pytest tests/reliability -m cluster -s -p no:randomly $(PYTEST_ARGS)

## test-cluster-rabbitmq4: the same on three RabbitMQ 4.0.5 nodes (scripts/rabbitmq-cluster.sh with CLUSTER_SERIES=4)
test-cluster-rabbitmq4: venv
	scripts/services.sh rabbitmq postgres rabbitmq4-root
	DP_TEST_RABBITMQ=4 RELIABILITY_FULL=1 $(BIN)/python -m pytest tests/reliability -m cluster -s -p no:randomly $(PYTEST_ARGS)

## cluster: start a local three-node RabbitMQ cluster (ports 5681-5683, management 15681-15683) and print its URLs
cluster:
	scripts/services.sh rabbitmq-cluster

## cluster-stop: stop it and remove its data
cluster-stop:
	scripts/rabbitmq-cluster.sh stop

## soak: the platform as make run deploys it, under a steady load for SOAK_MINUTES (60) with pruning throughout,
## the worker SIGKILLed every 10 min and RabbitMQ restarted once; a row every 5 min, then a verdict (docs/operations/reliability.md)
soak: venv
	scripts/services.sh rabbitmq postgres
	$(BIN)/python -m tests.reliability.soak

## test-fast: pure unit tests only (no services)
test-fast: venv
	$(BIN)/python -m pytest -m "not broker and not e2e and not browser and not reliability and not django_db" $(PYTEST_ARGS)

## lint: ruff (lint and import order: pyproject.toml [tool.ruff]) and mypy held to mypy-baseline.txt (make test runs both)
lint: venv
	$(BIN)/ruff check .
	$(BIN)/python -m harness.typecheck

## lint-baseline: rewrite mypy-baseline.txt from today's errors, after a fix lowered them (the strict packages stay out)
lint-baseline: venv
	$(BIN)/python -m harness.typecheck --write-baseline

## bench: the performance cases of the default deployment (v3, envelopes on; v2 beside it), each beside its floor in the same run: idle, bursts, rate, head of line, throughput, holding, webhooks, isolation (tarpit, flood), fan-out; the 20,000 burst also with envelopes off, idle and burst also on RabbitMQ 4.0.5; one table, artifacts/bench.json; BENCH_ARGS="--cases webhooks" for a part
bench: venv
	scripts/services.sh rabbitmq postgres postgres-statements rabbitmq4-root
	$(BIN)/python -m bench.suite $(BENCH_ARGS)

## bench-profile: where the CPU goes per message (web, worker, PostgreSQL, RabbitMQ) and what each broker stage costs, v2 and v3
bench-profile: venv
	scripts/services.sh rabbitmq postgres
	$(BIN)/python -m bench.broker_stages --versions v2,v3
	$(BIN)/python -m bench.cpu_split --version v2 --case rate
	$(BIN)/python -m bench.cpu_split --version v3 --case rate
	$(BIN)/python -m bench.cpu_split --version v2 --case burst
	$(BIN)/python -m bench.cpu_split --version v3 --case burst

## bench-moves: migrate_delays rate for 10,000 in-flight messages
bench-moves: venv
	scripts/services.sh rabbitmq postgres
	$(BIN)/python -m bench.moves

## bench-admin: the admin with 100,000 messages: page render times (own database, vhost, web server)
bench-admin: venv
	scripts/services.sh rabbitmq postgres
	$(BIN)/python -m bench.admin_changelist

## bench-history: rate, idle lateness, throughput and the admin/API pages with 0, 10 M and 50 M finished messages (~25 min)
bench-history: venv
	scripts/services.sh rabbitmq postgres
	$(BIN)/python -m bench.history

## bench-report: 10 M synthetic deliveries in a throwaway database, then export + Spark job + load
bench-report: venv
	scripts/services.sh postgres java
	$(BIN)/python -m bench.report_pipeline

## bench-ordering-explain: the ordering turn's statements explained on 10,000 keys x 10 and 1 key x 100,000, before and after 100,000 deliveries without a vacuum (own database, ~10 min)
bench-ordering-explain: venv
	scripts/services.sh postgres
	$(BIN)/python -m bench.explain_ordering $(BENCH_ARGS)

## docs: build the documentation site (docs/, mkdocs.yml) into site/, strictly: a broken link or page fails
docs: venv
	$(BIN)/mkdocs build --strict -d site
