# The one place the `make run` stack's environment comes from. Sourced by every script (setup,
# run, stop, status, env, reset-db); `make -s env` prints it for a shell:
#   eval "$(make -s env)"     # then `airflow …` and `exportctl …` talk to the running stack
#
# Choices (command line / environment first, then what the last setup remembered in
# $AIRFLOW_HOME/run.env, then the default):
#   DB      postgres (default: a local cluster in .airflow/pg) | sqlite (fragile, see README)
#   PORT    the API server / UI port (8080)
#   PGPORT  the local PostgreSQL port (first free from 5432, chosen once and remembered)
#   CLUSTER 1: `make cluster` (CeleryExecutor, Redis, moto S3, three workers; deploy/cluster.env)
#           with its own state in .airflow-cluster, so it never meets `make run`'s .airflow
#   SCHEDULERS, DAG_PROCESSORS (CLUSTER=1 only; 1 each by default) how many schedulers run (HA
#           on PostgreSQL's row locks) and over how many DAG bundles (one dag-processor each)
#           the DAG files are split (export_airflow/deploy/bundles.py; docs/how-to/deploy.md)
#   PG_SERVER postgresql://user:password@host[:port][/maintenance-db][?options]: use this existing
#           PostgreSQL server instead of the local cluster (no initdb; the supervisor does not
#           run it; `make stop` leaves it running; `make reset-db` drops only this stack's
#           databases). `local` (the default) is the local cluster in .airflow/pg.
#   PG_DB_PREFIX  prepended to the database names (airflow, exports, demo), so several stacks
#           share one server: PG_DB_PREFIX=stack1_ -> stack1_airflow, stack1_exports, stack1_demo
#   PG_TEMPLATE_PREFIX (setup only, not remembered) create a missing database x as a copy of
#           <PG_TEMPLATE_PREFIX>x (CREATE DATABASE … TEMPLATE …), e.g. one migrated once
# Nothing here needs editing to try it.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_CALLER_VARS="$(compgen -e)"   # what the caller set wins over deploy/cluster.env
CLUSTER="${CLUSTER:-}"
[ "$CLUSTER" = 0 ] && CLUSTER=""
if [ -n "$CLUSTER" ]; then CLUSTER=1; WHAT="make cluster"; export AIRFLOW_HOME="$ROOT/.airflow-cluster"
else WHAT="make run"; export AIRFLOW_HOME="$ROOT/.airflow"; fi
RUN_STATE="$AIRFLOW_HOME/run.env"        # remembered DB / PORT / PGPORT / PG_SERVER / PG_DB_PREFIX
RUN_DIR="$AIRFLOW_HOME/run"              # supervisor pid, status, component logs
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY="$(command -v python3.11 || command -v python3)"

_remembered() { if [ -f "$RUN_STATE" ]; then sed -n "s/^$1=//p" "$RUN_STATE" | tail -n 1; fi; }
DB="${DB:-$(_remembered DB)}"
DB="${DB:-postgres}"
PORT="${PORT:-$(_remembered PORT)}"
PORT="${PORT:-8080}"
PGPORT="${PGPORT:-$(_remembered PGPORT)}"
REDISPORT="${REDISPORT:-$(_remembered REDISPORT)}"
PG_SERVER="${PG_SERVER:-$(_remembered PG_SERVER)}"
PG_SERVER="${PG_SERVER:-local}"
PG_DB_PREFIX="${PG_DB_PREFIX-$(_remembered PG_DB_PREFIX)}"
PG_TEMPLATE_PREFIX="${PG_TEMPLATE_PREFIX:-}"
S3PORT="${S3PORT:-$(_remembered S3PORT)}"
STATSDPORT="${STATSDPORT:-$(_remembered STATSDPORT)}"
case "$DB" in
  postgres|postgresql|pg) DB=postgres ;;
  sqlite) ;;
  *) echo "DB=$DB is not a choice; use make run DB=postgres (the default) or DB=sqlite" >&2
     return 2 2>/dev/null || exit 2 ;;
esac
for _var in PG_DB_PREFIX PG_TEMPLATE_PREFIX; do
  # Part of database names (quoted in SQL, verbatim in URLs): keep them plain.
  if ! [[ "${!_var}" =~ ^[a-z0-9_]{0,40}$ ]]; then
    echo "$_var=${!_var} is not a choice: lower-case letters, digits and _ only (at most 40)" >&2
    return 2 2>/dev/null || exit 2
  fi
done
unset _var
if [ "$PG_SERVER" != local ]; then
  if [ "$DB" != postgres ]; then
    echo "PG_SERVER is a PostgreSQL server; drop DB=$DB" >&2
    return 2 2>/dev/null || exit 2
  fi
  # postgresql://user:password@host[:port][/maintenance-db][?options]; the user creates the
  # stack's databases (CREATEDB), the password percent-encoded as in any libpq URI.
  if ! [[ "$PG_SERVER" =~ ^postgres(ql)?://([^/?@]+@[^/?@]+)(/([^?]*))?(\?(.*))?$ ]]; then
    echo "PG_SERVER=$(sed -E 's#^([a-z0-9+]+://[^:/@]*):[^@]*@#\1:***@#' <<< "$PG_SERVER") is not a server URL; use PG_SERVER=postgresql://user:password@host:port" >&2
    return 2 2>/dev/null || exit 2
  fi
  PG_SERVER_NETLOC="${BASH_REMATCH[2]}"                 # user:password@host:port
  PG_SERVER_MAINTENANCE_DB="${BASH_REMATCH[4]:-postgres}"
  PG_SERVER_QUERY="${BASH_REMATCH[6]:+?${BASH_REMATCH[6]}}"
  _hostport="${PG_SERVER_NETLOC##*@}"
  if [[ "$_hostport" =~ :([0-9]+)$ ]]; then PGPORT="${BASH_REMATCH[1]}"; else PGPORT=5432; fi
  unset _hostport
fi

# PostgreSQL: the newest Debian server binaries; data in .airflow/pg, owned by `postgres` when
# we are root (PostgreSQL refuses to run as root), else by the invoking user.
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
# .airflow/pg, or where it links to (see pg_init: a project postgres cannot reach). The link is
# made by the first setup, so a script that runs setup reads it again afterwards (run.sh).
pg_data_dir() { readlink -f "$AIRFLOW_HOME/pg" 2>/dev/null || echo "$AIRFLOW_HOME/pg"; }
PG_DATA="$(pg_data_dir)"
PG_OWNER=""
[ "$(id -u)" = 0 ] && PG_OWNER=postgres
PG_USER=exports
PG_PASSWORD=exports
# Set (exported) when this run picked PGPORT itself: such a port may move if another server
# takes it before PostgreSQL binds it (scripts/pg.sh, pg_port_check and pg_start_for_setup).
PGPORT_PICKED="${PGPORT_PICKED:-}"
if [ "$DB" = postgres ] && [ -z "$PGPORT" ]; then
  # First setup: the first free port from 5432 (setup remembers it in run.env).
  PGPORT="$("$PY" "$ROOT/scripts/ports.py" first-free 5432 2>/dev/null || echo 5432)"
  PGPORT_PICKED=1
fi
if [ -n "$CLUSTER" ]; then
  if [ "$DB" != postgres ]; then
    echo "make cluster needs PostgreSQL (Celery workers share the metadata DB); drop DB=$DB" >&2
    return 2 2>/dev/null || exit 2
  fi
  # First setup: free ports for the broker and the object store (remembered in run.env).
  [ -n "$REDISPORT" ] || REDISPORT="$("$PY" "$ROOT/scripts/ports.py" first-free 6379 2>/dev/null || echo 6379)"
  [ -n "$S3PORT" ] || S3PORT="$("$PY" "$ROOT/scripts/ports.py" first-free 9000 2>/dev/null || echo 9000)"
  [ -n "$STATSDPORT" ] || STATSDPORT="$("$PY" "$ROOT/scripts/ports.py" first-free-udp 8125 2>/dev/null || echo 8125)"
  export REDISPORT S3PORT STATSDPORT
fi
# How many schedulers and dag-processors (remembered in run.env with the ports).
SCHEDULERS="${SCHEDULERS:-$(_remembered SCHEDULERS)}"
SCHEDULERS="${SCHEDULERS:-1}"
DAG_PROCESSORS="${DAG_PROCESSORS:-$(_remembered DAG_PROCESSORS)}"
DAG_PROCESSORS="${DAG_PROCESSORS:-1}"
for _var in SCHEDULERS DAG_PROCESSORS; do
  if ! [[ "${!_var}" =~ ^[1-8]$ ]]; then
    echo "$_var=${!_var} is not a choice: a number from 1 to 8 (make cluster $_var=2)" >&2
    return 2 2>/dev/null || exit 2
  fi
  if [ -z "$CLUSTER" ] && [ "${!_var}" != 1 ]; then
    echo "$_var=${!_var} needs the Celery cluster: make cluster $_var=${!_var} (make run runs one of each)" >&2
    return 2 2>/dev/null || exit 2
  fi
done
unset _var
export SCHEDULERS DAG_PROCESSORS
# CELERY_WORKERS=1 (make cluster only): one Celery worker serving every queue instead of the three
# of docker-compose.yaml (scripts/supervise.py ONE_WORKER; the benches' "1 Celery worker").
if [ -n "${CELERY_WORKERS:-}" ] && { [ "$CELERY_WORKERS" != 1 ] || [ -z "$CLUSTER" ]; }; then
  echo "CELERY_WORKERS=$CELERY_WORKERS is not a choice: make cluster CELERY_WORKERS=1 (one worker serving every queue), or leave it unset (three workers)" >&2
  return 2 2>/dev/null || exit 2
fi
export DB PORT PGPORT PGPORT_PICKED CLUSTER PG_SERVER PG_DB_PREFIX PG_TEMPLATE_PREFIX

export PATH="$ROOT/.venv/bin:$PATH"               # the components are `airflow` from the venv
export EXPORT_HOME="$ROOT"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
# DAG_PROCESSORS=N (make cluster): the DAG files split over N bundles dags-1..dags-N, a company
# by a stable hash of its id (export_lib/config/bundles.py); each dag-processor parses one
# (supervise.py: airflow dag-processor --bundle-name dags-n). Every component knows them all:
# a worker finds a task's DAG file through its bundle. One: Airflow's own dags-folder bundle.
if [ "$DAG_PROCESSORS" -gt 1 ]; then
  _list=""
  for _n in $(seq 1 "$DAG_PROCESSORS"); do
    _list+="${_list:+, }{\"name\": \"dags-$_n\", \"classpath\": \"export_airflow.deploy.bundles.DagsPartBundle\", \"kwargs\": {\"dags_folder\": \"$AIRFLOW__CORE__DAGS_FOLDER\", \"part\": $_n, \"parts\": $DAG_PROCESSORS}}"
  done
  export AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST="[$_list]"
  # The bundles' link folders in this stack's home, not the machine-wide /tmp/airflow: two
  # stacks on one machine would rewrite each other's dags-1.
  export AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_STORAGE_PATH="$AIRFLOW_HOME/dag_bundles"
  unset _list _n
fi
export AIRFLOW__CORE__PLUGINS_FOLDER="$ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
# Company-scoped users (ADR 0023): the FAB auth manager, a viewer and an operator role per
# company (setup makes them from the config) and the demo users in $AIRFLOW_HOME/demo-users.json.
# A single-tenant setup may choose SimpleAuthManager instead (it cannot limit a user to some
# DAGs): set AIRFLOW__CORE__AUTH_MANAGER=…SimpleAuthManager and EXPORT_UI_ALLOW_UNSCOPED_AUTH=true.
FAB_AUTH_MANAGER=airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager
export AIRFLOW__CORE__AUTH_MANAGER="${AIRFLOW__CORE__AUTH_MANAGER:-$FAB_AUTH_MANAGER}"
export AIRFLOW__FAB__CONFIG_FILE="${AIRFLOW__FAB__CONFIG_FILE:-$AIRFLOW_HOME/webserver_config.py}"
# SimpleAuthManager's users, when it is chosen (a test stack adds users).
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$AIRFLOW_HOME/passwords.json"
export AIRFLOW__API__PORT="$PORT"
# No [api] base_url: with one, Airflow's login sends a person to its host (localhost) while
# they may have opened the UI at another (127.0.0.1, the machine's name); the session cookie
# then belongs to one host and the export pages, asked at the other, answered "Not
# authenticated". Without it every login and redirect stays on the address the person used.
# Behind a proxy on another host or path, set AIRFLOW__API__BASE_URL before `make run`.
# Moving the API port without this makes every task die with "connection refused".
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://localhost:$PORT/execution/"
# Each file re-parsed every 30 s; the dags folder listed every 30 s for new, removed and
# changed files. A value already set wins (the test suite's shared stack lists every 5 s, so a
# company file a test writes is parsed within seconds instead of up to 30 s later).
export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="${AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL:-30}"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-30}"
# A scheduler that was killed leaves queued/running task instances behind; its successor resets
# them after it has seen the dead one miss its heartbeat (30 s), checked every 30 s (default 300).
export AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL=30
# recover_missed (ADR 0006) creates the backfills of missed slots through the REST API as this
# user; production defines the connection in the UI or a secrets backend instead.
export AIRFLOW_CONN_EXPORT_AIRFLOW_API="${AIRFLOW_CONN_EXPORT_AIRFLOW_API:-http://admin:admin@localhost:$PORT}"
# A task learns it was cleared or marked (and must stop, on_kill cancelling its source query)
# from a refused heartbeat: every 2 s instead of 5 s, so a cleared render's query is gone from
# the source within ~3 s (tests/system/scheduler/test_runaway.py).
export AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL=2
# A task's calls to the execution API wait up to 30 s for an answer (Airflow's default is 5 s,
# 5 tries ~40 s in all): on a loaded 2-core machine the api-server stalled ~60 s and every task
# starting then failed before its first line ("httpx.ReadTimeout" in the scheduler log,
# seen in CI), costing each a retry delay. A value already set wins.
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="${AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT:-30}"
export EXPORT_ARTIFACT_ROOT="${EXPORT_ARTIFACT_ROOT:-$ROOT/exports/artifacts}"
export EXPORT_DEMO_FEED=1                         # demo_feed may write to this demo source

# The server's user:password@host:port and the URL options (PG_SERVER's, else the local cluster's).
pg_netloc() { if [ "$PG_SERVER" != local ]; then echo "$PG_SERVER_NETLOC"; else echo "$PG_USER:$PG_PASSWORD@127.0.0.1:$PGPORT"; fi; }
PG_QUERY=""
[ "$PG_SERVER" = local ] || PG_QUERY="$PG_SERVER_QUERY"
if [ "$DB" = postgres ]; then
  _pg="$(pg_netloc)"
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://$_pg/${PG_DB_PREFIX}airflow$PG_QUERY"
  export EXPORT_LEDGER_URL="${EXPORT_LEDGER_URL:-postgresql+psycopg://$_pg/${PG_DB_PREFIX}exports$PG_QUERY}"
  export AIRFLOW_CONN_DEMO_SOURCE="${AIRFLOW_CONN_DEMO_SOURCE:-postgresql://$_pg/${PG_DB_PREFIX}demo$PG_QUERY}"
  # 2 cores: a few task processes at once; the pools (deploy/pools.json) share them out.
  # Sized for the manual lane (ADR 0018): parallelism >= the render budget (4,
  # EXPORT_RENDER_BUDGET) + the export_manual pool (2). The scheduler queues at most this many
  # tasks at once, by priority, whatever their pools. Renders are the only tasks that hold a
  # slot for minutes in numbers, and never more than the budget (one over it reschedules and
  # frees its slot); catch-up's are 2 of them at most (export_catchup). So while catch-up
  # saturates its pool, even with every budget place taken, 2 slots keep turning over short
  # tasks, and each that frees goes to the highest priority waiting: manual work
  # (MANUAL_PRIORITY, plugins/export_airflow/deploy/cluster_policy.py). `make cluster` gets the same
  # number: the Celery executor counts what it sent until it finishes, waiting in the broker or
  # not. tests/dags/test_manual_lane.py checks the inequality.
  export AIRFLOW__CORE__PARALLELISM=6
  unset _pg
else
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
  export EXPORT_LEDGER_URL="${EXPORT_LEDGER_URL:-sqlite:///$AIRFLOW_HOME/ledger.db}"
  export AIRFLOW_CONN_DEMO_SOURCE="${AIRFLOW_CONN_DEMO_SOURCE:-sqlite:///$AIRFLOW_HOME/demo_source.db}"
fi

if [ -n "$CLUSTER" ]; then
  # The settings docker-compose.yaml's Airflow services share (deploy/cluster.env), then what
  # compose gets from its service names and .env: here local ports.
  # A variable already set (command line / environment, e.g. a test's shorter lease) wins.
  while IFS= read -r _line; do
    case "$_line" in ''|'#'*) continue ;; esac
    _key="${_line%%=*}"
    grep -qx "$_key" <<< "$_CALLER_VARS" || export "$_line"
  done < "$ROOT/deploy/cluster.env"
  unset _line _key
  _pg="$(pg_netloc)"
  export AIRFLOW__CELERY__BROKER_URL="redis://127.0.0.1:$REDISPORT/0"
  export AIRFLOW__CELERY__RESULT_BACKEND="db+postgresql://$_pg/${PG_DB_PREFIX}airflow$PG_QUERY"
  # moto's server accepts any key; compose signs with MinIO's root user.
  export AIRFLOW_CONN_ARTIFACTS_S3="aws://exports:exports@/?endpoint_url=http%3A%2F%2F127.0.0.1%3A$S3PORT&region_name=us-east-1"
  # deploy/cluster.env switches StatsD on; compose sends to its statsd-exporter, here the
  # supervisor's listener (scripts/statsd_sink.py) writes what arrives to run/statsd.txt.
  # A host and port already set win (bench/cluster.py listens itself).
  export AIRFLOW__METRICS__STATSD_HOST="${AIRFLOW__METRICS__STATSD_HOST:-127.0.0.1}"
  export AIRFLOW__METRICS__STATSD_PORT="${AIRFLOW__METRICS__STATSD_PORT:-$STATSDPORT}"
  unset _pg
fi

# The ledger as an Airflow connection: tasks and the export pages look
# `export_ledger` up the Airflow way (UI, CLI, secrets backends, then this variable), so a
# rotated password or a secrets backend reaches it; exportctl reads EXPORT_LEDGER_URL. Made from
# it unless set: the same database either way.
export AIRFLOW_CONN_EXPORT_LEDGER="${AIRFLOW_CONN_EXPORT_LEDGER:-${EXPORT_LEDGER_URL/#postgresql+psycopg:/postgresql:}}"

# The variables `make -s env` prints (scripts/env.sh).
ENV_VARS=(PATH EXPORT_HOME AIRFLOW_HOME DB PORT PGPORT $([ "$PG_SERVER" = local ] || echo PG_SERVER) ${PG_DB_PREFIX:+PG_DB_PREFIX} $(compgen -e | grep -E '^(AIRFLOW__|AIRFLOW_CONN_)' | sort)
          EXPORT_LEDGER_URL EXPORT_ARTIFACT_ROOT EXPORT_DEMO_FEED)
if [ -n "$CLUSTER" ]; then
  ENV_VARS+=(CLUSTER REDISPORT S3PORT STATSDPORT SCHEDULERS DAG_PROCESSORS EXPORT_ARTIFACT_CONN EXPORT_LOG_FORMAT EXPORT_RENDER_BUDGET
             EXPORT_RENDER_BUDGET_PER_COMPANY EXPORT_RENDER_LEASE_SECONDS)
fi
