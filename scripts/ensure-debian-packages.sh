#!/usr/bin/env bash
# The Debian packages the test session needs (real servers, no mocks); with the argument `run`
# only those `make run` needs (PostgreSQL, runuser); with `cluster` those `make cluster` needs
# (and redis-server). Installed when missing and we are root;
# otherwise the exact command is printed.
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v runuser >/dev/null 2>&1 || missing+=(util-linux)
# The test session also drives headless Chromium (the operations page) and a Redis broker (the
# Celery cluster); `make run` needs neither.
[ "${1:-}" = cluster ] && { command -v redis-server >/dev/null 2>&1 || missing+=(redis-server); }
if [ "${1:-}" != run ] && [ "${1:-}" != cluster ]; then
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
fi
[ "${1:-}" = run ] || [ "${1:-}" = cluster ] || command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
# faketime: a worker whose clock runs minutes ahead or behind (tests/integration/ledger/
# test_clock_skew.py); the faketime package brings libfaketime with it.
[ "${1:-}" = run ] || [ "${1:-}" = cluster ] || command -v faketime >/dev/null 2>&1 || missing+=(faketime)
# kubectl's client-side dry run of deploy/kubernetes/ (tests/integration/test_kubectl.py).
[ "${1:-}" = run ] || [ "${1:-}" = cluster ] || command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "Installing missing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "Debian packages are missing: ${missing[*]}" >&2
  echo "Install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
