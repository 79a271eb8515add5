# Sourced by the run/setup scripts: the embedded default (SQLite metadata, LocalExecutor, examples
# off, dags/plugins pointed at the repo, fixed admin login). Nothing here needs editing to try it.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${PORT:-8080}"
export PATH="$ROOT/.venv/bin:$PATH"               # airflow standalone spawns `airflow` from PATH
export EXPORT_HOME="$ROOT"
export AIRFLOW_HOME="$ROOT/.airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$AIRFLOW_HOME/passwords.json"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
export AIRFLOW__API__PORT="$PORT"
export AIRFLOW__API__BASE_URL="http://localhost:$PORT"
# Moving the API port without this makes every task die with "connection refused".
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://localhost:$PORT/execution/"
export AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL=30
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=30
export EXPORT_LEDGER_URL="${EXPORT_LEDGER_URL:-sqlite:///$AIRFLOW_HOME/ledger.db}"
export EXPORT_ARTIFACT_ROOT="${EXPORT_ARTIFACT_ROOT:-$ROOT/exports/artifacts}"
