#!/usr/bin/env bash
# `make stop`: end the process group `make run` started (standalone and every child it spawned).
set -uo pipefail
source "$(dirname "$0")/airflow-env.sh"
PIDFILE="$AIRFLOW_HOME/airflow.pid"
if [ ! -f "$PIDFILE" ]; then echo "Airflow is not running (no $PIDFILE)."; exit 0; fi
pid=$(cat "$PIDFILE")
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
fi
# Children that left the group (task supervisors) are found by AIRFLOW_HOME in their environment.
for p in $(pgrep -f "airflow" || true); do
  if { tr "\0" "\n" < "/proc/$p/environ"; } 2>/dev/null | grep -qx "AIRFLOW_HOME=$AIRFLOW_HOME"; then
    kill -KILL "$p" 2>/dev/null || true
  fi
done
rm -f "$PIDFILE"
echo "Airflow stopped."
