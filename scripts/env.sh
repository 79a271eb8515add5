#!/usr/bin/env bash
# `make -s env`: the running stack's environment as shell exports, so that after
#   eval "$(make -s env)"
# `airflow …` and `exportctl …` use the same metadata DB, ledger and artifacts as `make run`.
set -euo pipefail
source "$(dirname "$0")/airflow-env.sh"
echo "export PATH=$(printf '%q' "$ROOT/.venv/bin"):\"\$PATH\""
for var in "${ENV_VARS[@]}"; do
  [ "$var" = PATH ] && continue
  [ -n "${!var+x}" ] && echo "export $var=$(printf '%q' "${!var}")"
done
