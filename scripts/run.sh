#!/usr/bin/env bash
# `make run`: check the ports, run `make setup`, then start the supervisor (scripts/supervise.py)
# in the background: PostgreSQL, the api-server, then scheduler, dag-processor and triggerer,
# each restarted if it exits. `make status` shows them, `make stop` ends everything.
# With CLUSTER=1 (`make cluster`): the Celery topology of docker-compose.yaml, in .airflow-cluster
# (Redis, moto's S3 server and three Celery workers too); `make cluster-stop` ends it.
set -euo pipefail
source "$(dirname "$0")/airflow-env.sh"
source "$ROOT/scripts/pg.sh"
cd "$ROOT"
SUPERVISOR_PID="$RUN_DIR/supervisor.pid"
if [ -f "$SUPERVISOR_PID" ] && kill -0 "$(cat "$SUPERVISOR_PID")" 2>/dev/null; then
  echo "$WHAT is already running (supervisor pid $(cat "$SUPERVISOR_PID")) on http://localhost:$PORT; 'make status' shows it, 'make stop' ends it."
  exit 0
fi
if ! "$PY" "$ROOT/scripts/ports.py" free "$PORT"; then
  echo "Port $PORT is already in use, so the Airflow UI cannot start there; pick another: make run PORT=$("$PY" "$ROOT/scripts/ports.py" first-free $((PORT + 1)) 2>/dev/null || echo 8090)" >&2
  exit 1
fi
if [ -n "$CLUSTER" ]; then
  command -v redis-server >/dev/null || { echo "redis-server is missing (the Celery broker); install it with: bash scripts/ensure-debian-packages.sh cluster" >&2; exit 1; }
  for p in "$REDISPORT" "$S3PORT"; do
    if ! "$PY" "$ROOT/scripts/ports.py" free "$p"; then
      echo "Port $p is already in use (REDISPORT=$REDISPORT, S3PORT=$S3PORT); pick another: make cluster REDISPORT=… S3PORT=…" >&2
      exit 1
    fi
  done
  if ! "$PY" "$ROOT/scripts/ports.py" free-udp "$STATSDPORT"; then
    echo "UDP port $STATSDPORT is already in use (the StatsD listener); pick another: make cluster STATSDPORT=…" >&2
    exit 1
  fi
fi
if pg_external; then
  echo "==> PostgreSQL: PG_SERVER=$(pg_server_masked "$PG_SERVER") (databases ${PG_DB_PREFIX}airflow, ${PG_DB_PREFIX}exports, ${PG_DB_PREFIX}demo; not started or stopped here)"
elif [ "$DB" = postgres ]; then
  pg_check_version
  if pg_running; then pg_stop; fi   # left over from an interrupted setup: the supervisor runs it
  pg_port_check
else
  echo "==> DB=sqlite: Airflow metadata and ledger in SQLite files; fragile under load (the scheduler can die on 'database is locked'), use the default DB=postgres for anything but a quick look"
fi

bash "$ROOT/scripts/setup.sh"
if [ "$DB" = postgres ] && ! pg_external; then
  # setup may have moved a port this run picked (another server took it): follow it; and the
  # port must still be free for the supervisor's PostgreSQL (setup stopped its own).
  moved="$(_remembered PGPORT)"
  if [ -n "$moved" ] && [ "$moved" != "$PGPORT" ]; then pg_repoint "$PGPORT" "$moved"; fi
  pg_port_check
fi
# The first setup may have put the cluster elsewhere (pg_init: a project `postgres` cannot
# enter, e.g. under /root), linked from .airflow/pg: the supervisor starts PostgreSQL as
# `postgres`, which cannot follow that link, so it gets the resolved directory.
PG_DATA="$(pg_data_dir)"
if pg_external; then
  where="$(pg_server_masked "$PG_SERVER")"
else
  where="PostgreSQL on 127.0.0.1:$PGPORT"
fi
dbs="databases ${PG_DB_PREFIX}airflow, ${PG_DB_PREFIX}exports, ${PG_DB_PREFIX}demo"

mkdir -p "$RUN_DIR" "$AIRFLOW_HOME/logs"
rm -f "$RUN_DIR/status.json"
export ROOT PG_BIN PG_DATA PG_OWNER
setsid nohup "$PY" "$ROOT/scripts/supervise.py" run >>"$RUN_DIR/supervisor.out" 2>&1 </dev/null &
supervisor=$!
echo "==> Starting the components (supervisor pid $supervisor; log: $RUN_DIR/supervisor.log)"
if ! "$PY" "$ROOT/scripts/supervise.py" wait-up 300 "$supervisor"; then
  echo "$WHAT did not come up within 5 minutes; 'make status' and $RUN_DIR/<component>.log say why:" >&2
  "$PY" "$ROOT/scripts/supervise.py" status >&2 || true
  tail -20 "$RUN_DIR/supervisor.log" >&2 || true
  exit 1
fi
"$PY" "$ROOT/scripts/supervise.py" status
# The pools as deploy/pools.json sets them (Admin → Pools shows them live).
pools="$("$PY" -c 'import json, sys; print(", ".join(n + " " + str(p["slots"]) for n, p in json.load(open(sys.argv[1])).items()))' "$ROOT/deploy/pools.json" || echo "see deploy/pools.json")"
# The company-scoped demo users setup made (FAB, ADR 0023): one viewer and one operator each.
demo_users() {
  [ -f "$AIRFLOW_HOME/demo-users.json" ] || return 0
  "$PY" - "$AIRFLOW_HOME/demo-users.json" <<'PYEOF'
import json, sys
users = json.load(open(sys.argv[1]))
print(f"  Company users (only their company's DAGs, runs, logs and pages; {sys.argv[1]}):")
for name, u in sorted(users.items()):
    print(f"                {name:<28} {u['password']:<18} {u['role']} of {u['company']}")
PYEOF
}
if [ -n "$CLUSTER" ]; then
  cat <<MSG

  Airflow UI:   http://localhost:$PORT   (login: admin / admin)   CeleryExecutor, three workers:
                worker-default (queue default), worker-large (exports_large, concurrency 1),
                worker-manual (exports_manual, concurrency 2: manual exports only, ADR 0018)
$(demo_users)
  Pools:        $pools
  Broker:       Redis on 127.0.0.1:$REDISPORT      Artifacts: s3://exports/artifacts on moto, http://127.0.0.1:$S3PORT (in memory)
  Metrics:      StatsD on udp://127.0.0.1:$STATSDPORT, every line received in $RUN_DIR/statsd.txt
  Logs:         JSON lines (EXPORT_LOG_FORMAT=json, [logging] json_logs); task logs in $AIRFLOW_HOME/logs
  Database:     $where ($dbs)
  Ledger:       eval "\$(make -s env CLUSTER=1)"; exportctl runs
  Status:       make status CLUSTER=1     Stop: make cluster-stop
MSG
  exit 0
fi
cat <<MSG

  Airflow UI:   http://localhost:$PORT   (login: admin / admin)
$(demo_users)
  Pools:        $pools
                (manual exports run in export_manual, ahead of scheduled and catch-up work)
  Database:     $( [ "$DB" = postgres ] && echo "$where ($dbs)" || echo "SQLite files in $AIRFLOW_HOME" )
  Exports:      $ROOT/exports/artifacts   (published artifacts + manifests)
                $ROOT/exports/outbox      (per-company local delivery destination)
  Ledger:       eval "\$(make -s env)"; exportctl runs
  Status:       make status        Stop: make stop

  The demo schedules are unpaused and catch up their most recent periods now.
MSG
