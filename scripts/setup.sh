#!/usr/bin/env bash
# `make setup`: everything `make run` needs except starting Airflow. Idempotent: safe to repeat.
# With DB=postgres (the default) it initialises .airflow/pg once and starts the server only for
# as long as it needs it (or uses the one `make run` is running); with PG_SERVER it only creates
# the stack's databases there if they are missing (from templates with PG_TEMPLATE_PREFIX).
set -euo pipefail
source "$(dirname "$0")/airflow-env.sh"
source "$ROOT/scripts/pg.sh"
cd "$ROOT"
mkdir -p "$AIRFLOW_HOME" "$RUN_DIR" "$ROOT/exports"
[ -f "$AIRFLOW_HOME/passwords.json" ] || echo '{"admin": "admin"}' > "$AIRFLOW_HOME/passwords.json"

started_pg=""
cleanup() { if [ -n "$started_pg" ]; then pg_stop; fi; }
trap cleanup EXIT

if pg_external; then
  pg_check_server
  pg_create_databases
elif [ "$DB" = postgres ]; then
  if [ "$(id -u)" = 0 ] && ! command -v runuser >/dev/null; then
    echo "runuser (util-linux) is missing; install it with: bash scripts/ensure-debian-packages.sh" >&2
    exit 1
  fi
  pg_check_version
  if ! pg_running; then
    pg_port_check
    pg_init
    pg_start_for_setup
    started_pg=1
  fi
  pg_create_databases
fi
# Remember the choices so later commands (stop, status, env, exportctl) find this stack.
printf 'DB=%s\nPORT=%s\nPGPORT=%s\n' "$DB" "$PORT" "$PGPORT" > "$RUN_STATE"
if pg_external; then
  chmod 600 "$RUN_STATE"   # the server's password
  printf 'PG_SERVER=%s\nPG_DB_PREFIX=%s\n' "$PG_SERVER" "$PG_DB_PREFIX" >> "$RUN_STATE"
elif [ -n "$PG_DB_PREFIX" ]; then
  printf 'PG_DB_PREFIX=%s\n' "$PG_DB_PREFIX" >> "$RUN_STATE"
fi
[ -z "$CLUSTER" ] || printf 'REDISPORT=%s\nS3PORT=%s\nSTATSDPORT=%s\nSCHEDULERS=%s\nDAG_PROCESSORS=%s\n' \
  "$REDISPORT" "$S3PORT" "$STATSDPORT" "$SCHEDULERS" "$DAG_PROCESSORS" >> "$RUN_STATE"

echo "==> Airflow metadata DB ($(pg_server_masked "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"))"
if [ -n "$PG_AIRFLOW_CURRENT" ]; then
  echo "    a copy of a template migrated by this Airflow release, with these pools: nothing to do"
else
  # With FAB's tables whatever the auth manager, so one migrated template serves both kinds.
  AIRFLOW__CORE__AUTH_MANAGER="$FAB_AUTH_MANAGER" airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 \
    || { tail -30 "$AIRFLOW_HOME/db-migrate.log"; exit 1; }
fi

echo "==> Pools and cluster policy"
if [ -z "$PG_AIRFLOW_CURRENT" ]; then
  airflow pools import "$ROOT/deploy/pools.json" >/dev/null
  if [ "$DB" = postgres ]; then
    pg_psql_admin -c "COMMENT ON DATABASE \"${PG_DB_PREFIX}airflow\" IS '$(pg_airflow_stamp)'" >/dev/null
  fi
fi
# The cluster policy comes with the installed package (its airflow.policy entry point); the
# copy of airflow_local_settings.py earlier setups wrote here is not needed.
rm -f "$AIRFLOW_HOME/config/airflow_local_settings.py"

if [ "$DAG_PROCESSORS" -gt 1 ]; then
  echo "==> DAG bundles (one per dag-processor)"
  # Registered once here: each dag-processor registers them as it starts, and two starting
  # together on a database without them race on the same row (one exits).
  PYTHONPATH="$ROOT/plugins${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m export_airflow.deploy.bundles \
    register >"$AIRFLOW_HOME/bundles.log" 2>&1 || { tail -30 "$AIRFLOW_HOME/bundles.log"; exit 1; }
  grep -v "^20..-..-..T" "$AIRFLOW_HOME/bundles.log" | sed 's/^/    /'
fi

echo "==> Export ledger"
exportctl ledger upgrade

echo "==> Demo reporting database"
# EXPORT_DEMO_DAYS: how many days back the demo rows reach (bench/cluster.py's year-long
# catch-up needs more than the default 21).
exportctl demo seed --config dags/config --days "${EXPORT_DEMO_DAYS:-21}"

echo "==> Config check (and a DAG loader for every company file)"
exportctl loaders dags
exportctl validate dags/config

if [ "$AIRFLOW__CORE__AUTH_MANAGER" = "$FAB_AUTH_MANAGER" ]; then
  echo "==> Company roles and demo users (FAB; ADR 0023)"
  # Before any DAG is parsed: the dag-processor refuses a DAG whose roles do not exist.
  PYTHONPATH="$ROOT/plugins${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m export_airflow.access sync \
    --config-dir dags/config --demo-users "$AIRFLOW_HOME/demo-users.json" --admin-password admin \
    >"$AIRFLOW_HOME/roles.log" 2>&1 || { tail -30 "$AIRFLOW_HOME/roles.log"; exit 1; }
  grep -v "^20..-..-..T" "$AIRFLOW_HOME/roles.log" | sed 's/^/    /'
fi
