# Two commands on a fresh machine: `make run` (Airflow + demo, exports land in ./exports) and
# `make test`. Everything else is a step of those two.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP_VERSION := 25.3
PORT ?= 8080
export PORT

.PHONY: venv setup run stop test lint bench clean

$(VENV)/.installed: requirements.txt setup.cfg pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check pip==$(PIP_VERSION)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

venv: $(VENV)/.installed

## setup: venv, lock, AIRFLOW_HOME, metadata DB migration, pools, ledger, demo data (idempotent)
setup: venv
	@bash scripts/setup.sh

## run: setup, then Airflow standalone on http://localhost:$(PORT) with the demo schedules
run: setup
	@bash scripts/run.sh

## stop: stop every process `make run` started
stop:
	@bash scripts/stop.sh

## test: the whole suite; the session starts (and always stops) PostgreSQL and the other servers
test: venv
	@bash scripts/ensure-debian-packages.sh
	$(VENV)/bin/ruff check export_lib plugins dags tests bench
	$(PY) -m pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check export_lib plugins dags tests bench

bench: venv
	$(PY) bench/render.py --rows 2000000 --skip-pandas

clean: stop
	rm -rf .airflow exports logs
