#!/usr/bin/env bash
# `make reset-db`: stop the stack and delete its databases (.airflow/pg with the Airflow
# metadata, ledger and demo data; the SQLite files with DB=sqlite). The next `make run` starts
# fresh. The only command that deletes a data directory. As root in a project `postgres` cannot
# enter, the cluster lives in postgres's home (pg_init): deleted too, even if its link is gone.
set -uo pipefail
source "$(dirname "$0")/airflow-env.sh"
source "$ROOT/scripts/pg.sh"
bash "$ROOT/scripts/stop.sh" >/dev/null 2>&1 || true
if pg_external; then
  # Another server: only this stack's databases go (the choices in run.env stay, so the next
  # `make run` creates them there again).
  pg_drop_databases || exit 1
  rm -f "$AIRFLOW_HOME/airflow.db" "$AIRFLOW_HOME/ledger.db" "$AIRFLOW_HOME/demo_source.db"
  echo "Dropped ${PG_DB_PREFIX}airflow, ${PG_DB_PREFIX}exports and ${PG_DB_PREFIX}demo on $(pg_server_masked "$PG_SERVER"); the next 'make run' starts fresh."
  exit 0
fi
clusters=("$PG_DATA")
shared=""
if [ -n "$PG_OWNER" ]; then
  relocated="$(pg_relocated_dir)"
  shared="$(dirname "$relocated")"
  [ "$relocated" = "$PG_DATA" ] || [ ! -e "$relocated" ] || clusters+=("$relocated")
fi
# A data directory of another PostgreSQL version cannot be stopped with our pg_ctl; its server
# (if any) would hold postmaster.pid.
for dir in "${clusters[@]}"; do
  if [ -f "$dir/postmaster.pid" ]; then
    pid="$(head -n 1 "$dir/postmaster.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      echo "A PostgreSQL server (pid $pid) still runs on $dir; stop it first${PG_OWNER:+ (runuser -u $PG_OWNER -- $PG_BIN/pg_ctl -D $dir -m fast stop)}" >&2
      exit 1
    fi
  fi
done
elsewhere=""
for dir in "${clusters[@]}"; do
  if [ -n "$shared" ] && [ -e "$dir" ]; then
    case "$dir" in "$shared"/*) elsewhere="$elsewhere $dir" ;; esac
  fi
done
rm -rf "${clusters[@]}" "$AIRFLOW_HOME/pg" "$AIRFLOW_HOME/airflow.db" "$AIRFLOW_HOME/ledger.db" \
  "$AIRFLOW_HOME/demo_source.db" "$AIRFLOW_HOME/run.env"
[ -z "$elsewhere" ] || rmdir "$shared" 2>/dev/null || true   # once no checkout has one there
echo "Deleted the make run databases in $AIRFLOW_HOME${elsewhere:+ and the cluster in${elsewhere}}; the next 'make run' starts fresh."
