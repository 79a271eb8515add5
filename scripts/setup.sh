#!/usr/bin/env bash
# `make setup`: everything `make run` needs except starting Airflow. Idempotent: safe to repeat.
set -euo pipefail
source "$(dirname "$0")/airflow-env.sh"
cd "$ROOT"
mkdir -p "$AIRFLOW_HOME" "$ROOT/exports"
[ -f "$AIRFLOW_HOME/passwords.json" ] || echo '{"admin": "admin"}' > "$AIRFLOW_HOME/passwords.json"

echo "==> Airflow metadata DB ($AIRFLOW__DATABASE__SQL_ALCHEMY_CONN)"
airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 || { tail -30 "$AIRFLOW_HOME/db-migrate.log"; exit 1; }

echo "==> Pools and cluster policy"
airflow pools import "$ROOT/deploy/pools.json" >/dev/null
mkdir -p "$AIRFLOW_HOME/config"
cp "$ROOT/deploy/airflow_local_settings.py" "$AIRFLOW_HOME/config/airflow_local_settings.py"

echo "==> Export ledger ($EXPORT_LEDGER_URL)"
exportctl ledger upgrade

echo "==> Demo reporting database"
exportctl demo seed --config dags/config

echo "==> Config check"
exportctl validate dags/config
