#!/usr/bin/env bash
# The four Airflow processes of `make run`, started in order: the api-server first (tasks talk to
# its Execution API, so a scheduler that starts first sees its first tasks die with "connection
# refused"), then scheduler, dag-processor and triggerer. Ends them all when it is told to stop.
set -uo pipefail
source "$(dirname "$0")/airflow-env.sh"
pids=()
stop() { kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 0; }
trap stop TERM INT
airflow api-server --port "$PORT" 2>&1 | sed -u 's/^/api-server    | /' &
pids+=($!)
for _ in $(seq 1 150); do
  curl -fsS "http://localhost:$PORT/api/v2/version" >/dev/null 2>&1 && break
  sleep 1
done
for component in scheduler dag-processor triggerer; do
  airflow "$component" 2>&1 | sed -u "s/^/$(printf '%-13s' "$component")| /" &
  pids+=($!)
done
wait
