#!/usr/bin/env bash
# `make run`: check the ports, run `make setup`, then start the supervisor (scripts/supervise.py)
# in the background: PostgreSQL, the api-server, then scheduler, dag-processor and triggerer,
# each restarted if it exits. `make status` shows them, `make stop` ends everything.
set -euo pipefail
source "$(dirname "$0")/airflow-env.sh"
source "$ROOT/scripts/pg.sh"
cd "$ROOT"
SUPERVISOR_PID="$RUN_DIR/supervisor.pid"
if [ -f "$SUPERVISOR_PID" ] && kill -0 "$(cat "$SUPERVISOR_PID")" 2>/dev/null; then
  echo "make run is already running (supervisor pid $(cat "$SUPERVISOR_PID")) on http://localhost:$PORT; 'make status' shows it, 'make stop' ends it."
  exit 0
fi
if ! "$PY" "$ROOT/scripts/ports.py" free "$PORT"; then
  echo "Port $PORT is already in use, so the Airflow UI cannot start there; pick another: make run PORT=$("$PY" "$ROOT/scripts/ports.py" first-free $((PORT + 1)) 2>/dev/null || echo 8090)" >&2
  exit 1
fi
if [ "$DB" = postgres ]; then
  pg_check_version
  if pg_running; then pg_stop; fi   # left over from an interrupted setup: the supervisor runs it
  pg_port_check
else
  echo "==> DB=sqlite: Airflow metadata and ledger in SQLite files; fragile under load (the scheduler can die on 'database is locked'), use the default DB=postgres for anything but a quick look"
fi

bash "$ROOT/scripts/setup.sh"

mkdir -p "$RUN_DIR" "$AIRFLOW_HOME/logs"
rm -f "$RUN_DIR/status.json"
export ROOT PG_BIN PG_DATA PG_OWNER
setsid nohup "$PY" "$ROOT/scripts/supervise.py" run >>"$RUN_DIR/supervisor.out" 2>&1 </dev/null &
supervisor=$!
echo "==> Starting the components (supervisor pid $supervisor; log: $RUN_DIR/supervisor.log)"
if ! "$PY" "$ROOT/scripts/supervise.py" wait-up 300 "$supervisor"; then
  echo "make run did not come up within 5 minutes; 'make status' and $RUN_DIR/<component>.log say why:" >&2
  "$PY" "$ROOT/scripts/supervise.py" status >&2 || true
  tail -20 "$RUN_DIR/supervisor.log" >&2 || true
  exit 1
fi
"$PY" "$ROOT/scripts/supervise.py" status
cat <<MSG

  Airflow UI:   http://localhost:$PORT   (login: admin / admin)
  Database:     $( [ "$DB" = postgres ] && echo "PostgreSQL on 127.0.0.1:$PGPORT (databases airflow, exports, demo)" || echo "SQLite files in $AIRFLOW_HOME" )
  Exports:      $ROOT/exports/artifacts   (published artifacts + manifests)
                $ROOT/exports/outbox      (per-company local delivery destination)
  Ledger:       eval "\$(make -s env)"; exportctl runs
  Status:       make status        Stop: make stop

  The demo schedules are unpaused and catch up their most recent periods now.
MSG
