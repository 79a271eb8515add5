#!/usr/bin/env bash
# `make reset-db`: stop the stack and delete its databases (.airflow/pg with the Airflow
# metadata, ledger and demo data; the SQLite files with DB=sqlite). The next `make run` starts
# fresh. The only command that deletes a data directory.
set -uo pipefail
source "$(dirname "$0")/airflow-env.sh"
bash "$ROOT/scripts/stop.sh" >/dev/null 2>&1 || true
# A data directory of another PostgreSQL version cannot be stopped with our pg_ctl; its server
# (if any) would hold postmaster.pid.
if [ -f "$PG_DATA/postmaster.pid" ]; then
  pid="$(head -n 1 "$PG_DATA/postmaster.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    echo "A PostgreSQL server (pid $pid) still runs on $AIRFLOW_HOME/pg; stop it first" >&2
    exit 1
  fi
fi
rm -rf "$PG_DATA" "$AIRFLOW_HOME/pg" "$AIRFLOW_HOME/airflow.db" "$AIRFLOW_HOME/ledger.db" \
  "$AIRFLOW_HOME/demo_source.db" "$AIRFLOW_HOME/run.env"
echo "Deleted the make run databases in $AIRFLOW_HOME; the next 'make run' starts fresh."
