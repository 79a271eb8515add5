#!/usr/bin/env bash
# `make run`: start Airflow (api-server, then scheduler, dag-processor, triggerer) in the
# background; `make stop` ends it. Prints the URL, the login and where the files land.
set -euo pipefail
source "$(dirname "$0")/airflow-env.sh"
cd "$ROOT"
PIDFILE="$AIRFLOW_HOME/airflow.pid"
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "Airflow is already running (pid $(cat "$PIDFILE")) on http://localhost:$PORT — 'make stop' ends it."
  exit 0
fi
if python - "$PORT" <<'PY'
import socket, sys
s = socket.socket()
try:
    s.bind(("0.0.0.0", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)
PY
then
  echo "Port $PORT is already in use, so the Airflow UI cannot start there." >&2
  echo "Stop whatever uses it, or pick another port: make run PORT=8090" >&2
  exit 1
fi
mkdir -p "$AIRFLOW_HOME/logs"
setsid nohup bash "$ROOT/scripts/airflow-processes.sh" >"$AIRFLOW_HOME/airflow.log" 2>&1 < /dev/null &
echo $! > "$PIDFILE"
echo "==> Starting Airflow (log: $AIRFLOW_HOME/airflow.log)"
for _ in $(seq 1 120); do
  if curl -fsS "http://localhost:$PORT/api/v2/version" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "Airflow exited during start-up; last lines of the log:" >&2
    tail -40 "$AIRFLOW_HOME/airflow.log" >&2
    exit 1
  fi
  sleep 2
done
cat <<MSG

  Airflow UI:   http://localhost:$PORT   (login: admin / admin)
  Exports:      $ROOT/exports/artifacts   (published artifacts + manifests)
                $ROOT/exports/outbox      (per-company local delivery destination)
  Ledger:       .venv/bin/exportctl runs
  Stop:         make stop

  The demo schedules are unpaused and catch up their most recent periods now.
MSG
