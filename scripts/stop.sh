#!/usr/bin/env bash
# `make stop`: stop the supervisor (it stops the components in reverse order, PostgreSQL last),
# then make sure nothing of this stack is left: processes carrying its marker, a PostgreSQL
# server still running on .airflow/pg. A PG_SERVER (not this stack's) is left running.
set -uo pipefail
source "$(dirname "$0")/airflow-env.sh"
source "$ROOT/scripts/pg.sh"
SUPERVISOR_PID="$RUN_DIR/supervisor.pid"
stopped=""
if [ -f "$SUPERVISOR_PID" ] && kill -0 "$(cat "$SUPERVISOR_PID")" 2>/dev/null; then
  pid="$(cat "$SUPERVISOR_PID")"
  kill -TERM "$pid"
  for _ in $(seq 1 90); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  stopped=1
fi
# PostgreSQL left without its supervisor (killed) or by an interrupted setup.
if ! pg_external && [ -n "$PG_BIN" ] && pg_running; then
  pg_stop && stopped=1
fi
# Leftovers (the supervisor was killed, or a process outlived it): processes carrying this
# stack's marker in their environment, or renamed `airflow …` processes working in this project
# (scripts/supervise.py leftovers); never a shell that merely sourced the environment.
read -r -a leftovers <<< "$(ROOT="$ROOT" "$PY" "$ROOT/scripts/supervise.py" leftovers)"
if [ ${#leftovers[@]} -gt 0 ]; then
  echo "Stopping ${#leftovers[@]} leftover process(es): ${leftovers[*]}"
  kill -TERM "${leftovers[@]}" 2>/dev/null; sleep 2; kill -KILL "${leftovers[@]}" 2>/dev/null
fi
rm -f "$SUPERVISOR_PID"
if [ -n "$stopped" ]; then echo "$WHAT stopped."; else echo "$WHAT is not running."; fi
