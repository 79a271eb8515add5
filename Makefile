# Two commands on a fresh machine: `make run` (Airflow + demo on a local PostgreSQL, exports land
# in ./exports) and `make test`. Everything else is a step of those two.
# Choices: make run PORT=8090 (UI) PGPORT=5440 (PostgreSQL) DB=sqlite (fragile); remembered in
# .airflow/run.env for the later commands (scripts/airflow-env.sh). An existing PostgreSQL server
# instead of the local cluster: make run PG_SERVER=postgresql://user:password@host:port
# [PG_DB_PREFIX=stack1_] [PG_TEMPLATE_PREFIX=tmpl_] (docs/how-to/run-locally.md).
# `make help` lists every target.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP_VERSION := 25.3
# uv (pinned in the lock itself) installs the lock in ~15 s where pip took ~105 s on a fresh
# 2-core machine; no bytecode is compiled ahead (~100 CPU-s), Python compiles what is imported.
# scripts/install.sh (the image's install steps too) makes the venv exactly the lock, without
# resolving, then checks it (uv pip check): a package missing from the lock fails the install
# with its name, instead of whatever version is newest being resolved in.
UV_VERSION := $(shell sed -n 's/^uv==//p' requirements.txt)
# ... so every process must be free to write the bytecode of what it imports: with
# PYTHONDONTWRITEBYTECODE set (some CI images set it), each of the suite's hundreds of Airflow
# processes would compile Airflow again (~3.3 CPU-s each; measured: 6.3 s to import the
# scheduler's modules uncompiled, 2.9 s compiled).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help roles venv dist setup run stop status env reset-db postgres-packages cluster cluster-stop test test-fast test-unit soak acceptance lint bench docs clean

$(VENV)/.installed: requirements.txt setup.cfg setup.py pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check pip==$(PIP_VERSION) uv==$(UV_VERSION)
	@# A root egg-info (builds before ADR 0026 wrote it there; setup.py now uses build/) is a
	@# second copy of the distribution to processes run from the root: plugins loaded twice.
	@rm -rf airflow_scheduled_exports.egg-info
	PYTHON=$(PY) bash scripts/install.sh lock requirements.txt -e .
	@# uv compiles no bytecode: compile what our processes import once, one process per core,
	@# before processes started together each compile it (scripts/precompile.py)
	$(PY) scripts/precompile.py
	@touch $@

## venv: the virtualenv in .venv, exactly the lock (uv), with its bytecode compiled
venv: $(VENV)/.installed

## dist: the wheel (export_lib, export_airflow and their entry points) in dist/; install it into
## an Airflow 3.3 environment with the lock: scripts/install.sh lock requirements.txt dist/*.whl
dist: venv
	PYTHON=$(PY) bash scripts/install.sh wheel . dist

## setup: venv, PostgreSQL cluster, metadata DB migration, pools, ledger, demo data (idempotent)
setup: venv postgres-packages
	@bash scripts/setup.sh

## run: setup, then the supervised stack on http://localhost:8080 (PORT=…) with the demo schedules
run: venv postgres-packages
	@bash scripts/run.sh

## stop: stop every process `make run` started (PostgreSQL included, never a PG_SERVER)
stop:
	@bash scripts/stop.sh

## cluster: docker-compose.yaml's Celery topology without Docker (PostgreSQL, Redis, moto S3,
## api-server, scheduler, dag-processor, triggerer, three Celery workers) in .airflow-cluster;
## SCHEDULERS=2 DAG_PROCESSORS=2: two schedulers, the DAG files split over two bundles
cluster: venv
	@bash scripts/ensure-debian-packages.sh cluster
	@CLUSTER=1 bash scripts/run.sh

## cluster-stop: stop every process `make cluster` started
cluster-stop:
	@CLUSTER=1 bash scripts/stop.sh

## status: what is up (pid), since when, restart count and the last restart reason
status:
	@bash -c 'source scripts/airflow-env.sh && "$$PY" scripts/supervise.py status || true'

## env: the stack's environment for a shell: eval "$(make -s env)"
env:
	@bash scripts/env.sh

## reset-db: stop, then delete the stack's databases (.airflow/pg, the SQLite files, or its
## databases on a PG_SERVER)
reset-db:
	@bash scripts/reset-db.sh

## roles: make the company roles after adding a company file (FAB; ADR 0023); CLUSTER=1 too
roles:
	@bash -c 'source scripts/airflow-env.sh && "$$PY" -m export_airflow.access sync --config-dir dags/config'

postgres-packages:
	@[ "$(DB)" = sqlite ] || bash scripts/ensure-debian-packages.sh run

## test: every tier (tests/unit, integration, dags, system); the session starts (and always
## stops) PostgreSQL and the other servers. Four pytest workers; xdist hands out whole files,
## longest first, and the shared-stack scheduler modules as EXPORT_TEST_SHARED_STACKS groups (2),
## each on one worker and one stack; at most EXPORT_TEST_MAX_STACKS (3) system units at once,
## the other workers take the fast tiers meanwhile; tests/dags (Airflow in the worker) on at most
## EXPORT_TEST_AIRFLOW_WORKERS (2) workers (tests/support/workload.py).
## TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 4
PYTEST := $(PY) -m pytest --dist loadfile --no-loadscope-reorder
test: venv
	@bash scripts/ensure-debian-packages.sh
	$(VENV)/bin/ruff check export_lib plugins dags tests bench scripts
	$(PYTEST) -n $(TEST_WORKERS) --durations=30 tests $(PYTEST_ARGS)

## test-fast: the gate before a commit: unit + integration + dags (import-linter's layers
## included), no Airflow stack. Four workers on 2 cores: these tests mostly wait on servers and
## subprocesses (measured 0.8 of a core busy with two).
FAST_WORKERS ?= 4
test-fast: venv
	@bash scripts/ensure-debian-packages.sh
	$(VENV)/bin/ruff check export_lib plugins dags tests bench scripts
	$(PYTEST) -n $(FAST_WORKERS) --durations=10 tests/unit tests/integration tests/dags $(PYTEST_ARGS)

## test-unit: the quick loop: tests/unit only, no server, no Airflow (~70 s with four workers)
test-unit: venv
	$(PY) -m pytest -n $(FAST_WORKERS) tests/unit $(PYTEST_ARGS)

## soak: only the soak tests (longer with SOAK_LOOKBACK_HOURS=168 SOAK_TRIGGERS=5)
soak: venv
	@bash scripts/ensure-debian-packages.sh run
	$(PY) -m pytest tests/system/soak $(PYTEST_ARGS)

## acceptance: the long runs at their acceptance size, outside make test: the fault test with
## 20 companies and a 2-minute source outage, the soak over 168 h of catch-up with 5 manual
## exports, and the manual lane during a 7-day catch-up. make test runs the same tests
## at a smaller size (3 companies and a 45 s outage, 6 h, 1 day). Only here: two schedulers
## and two dag-processors with 8 companies, a scheduler killed mid-recovery and mid-burst.
acceptance: venv
	@bash scripts/ensure-debian-packages.sh
	FAULT_COMPANIES=20 FAULT_OUTAGE_SECONDS=120 SOAK_LOOKBACK_HOURS=168 SOAK_TRIGGERS=5 \
	  MANUAL_LANE_LOOKBACK_HOURS=168 HA_COMPANIES=8 \
	  $(PYTEST) -n $(TEST_WORKERS) --durations=10 tests/system/cluster/test_cluster.py \
	  tests/system/cluster/test_ha.py \
	  tests/system/soak/test_soak.py tests/system/scheduler/test_manual_lane.py $(PYTEST_ARGS)

## lint: ruff over the code and import-linter's layer contracts (.importlinter)
lint: venv
	$(VENV)/bin/ruff check export_lib plugins dags tests bench scripts
	PYTHONPATH=.:plugins $(VENV)/bin/lint-imports --no-cache

## docs: regenerate the reference pages (docs/reference/config.md, environment.md, cli.md,
## metrics-and-logs.md) and the config JSON Schemas (export_lib/config/*.schema.json) from the
## code; tests/unit/test_docs_reference.py fails until they are regenerated after a change
docs: venv
	$(PY) scripts/docs_reference.py

## bench: the render benchmark at 2 M rows with its bars (--check), recorded in bench/RESULTS.md;
## the others: bench/README.md
bench: venv
	$(PY) bench/render.py --rows 2000000 --skip-pandas --check --record

## clean: reset-db, then delete .airflow, exports and logs
clean: reset-db
	rm -rf .airflow exports logs

## help: this list: every target and what it does (from the "## target:" comments)
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); n = index($$0, ":"); \
	  printf "%-14s%s\n", substr($$0, 1, n - 1), substr($$0, n + 2); next } \
	  /^## / { sub(/^## /, ""); printf "%-14s%s\n", "", $$0 }' $(MAKEFILE_LIST)
