#!/usr/bin/env bash
# The install steps shared by `make venv`, `make dist` and the image (Dockerfile), so the image's
# steps are the ones tests/system/deploy/test_install.py runs in a fresh venv (no Docker engine is
# needed to prove them). Python: $PYTHON (default `python`). uv: the version the dev lock pins
# (requirements-dev.txt, `make lock`), installed with that Python's pip, its hashes checked (the
# stock Airflow image has pip): into the environment when the lock being installed pins uv (the
# dev venv), else into a temporary directory, so the runtime environment holds no installer.
#
#   scripts/install.sh wheel SRC OUT       build SRC's wheel into OUT (setuptools as pinned in
#                                         pyproject.toml)
#   scripts/install.sh lock LOCK [ARG...]  make the environment exactly LOCK (uv pip sync: no
#                                         dependency resolution, every hash required, and what
#                                         LOCK does not pin is removed, e.g. the base image's
#                                         other providers), then install ARG... without
#                                         dependencies (the wheel, or `-e .`), then check: a
#                                         package missing from LOCK fails here with its name,
#                                         nothing unpinned is ever installed
set -euo pipefail
py="${PYTHON:-python}"
mode="${1:-}"
if ! { [ "$mode" = wheel ] && [ $# -eq 3 ]; } && ! { [ "$mode" = lock ] && [ $# -ge 2 ]; }; then
  echo "usage: scripts/install.sh wheel SRC OUT | lock LOCK [ARG...] (got: $*)" >&2; exit 2
fi

# The uv requirement with its hashes, from LOCK or else the dev lock beside it (the checkout's
# for `wheel`): the line `uv==<version> \` and its --hash lines.
uv_requirement() { awk '/^uv==/ { p = 1 } p { print; if ($0 !~ /\\$/) exit }' "$1"; }
if [ "$mode" = wheel ]; then
  uv_lock="$2/requirements-dev.txt"
elif grep -q '^uv==' "$2"; then
  uv_lock="$2"
else
  uv_lock="$(dirname "$2")/requirements-dev.txt"
fi
[ -f "$uv_lock" ] && uv_requirement "$uv_lock" | grep -q -- '--hash=' || {
  echo "$uv_lock pins no uv with hashes (uv==<version> \\ --hash=...): run make lock" >&2; exit 2; }
uv_version="$(uv_requirement "$uv_lock" | sed -n 's/^uv==\([^ ]*\).*/\1/p')"
pip_uv() { "$py" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
             "$@" -r <(uv_requirement "$uv_lock"); }
if [ "$uv_lock" = "${2:-}" ] || [ "$mode" = wheel ]; then
  uv="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/uv"
  [ "$("$uv" --version 2>/dev/null | cut -d' ' -f2)" = "$uv_version" ] || pip_uv
else
  tool="$(mktemp -d)"; trap 'rm -rf "$tool"' EXIT
  PIP_USER=0 pip_uv --target "$tool"  # --target refuses --user, which an image may set (PIP_USER)
  uv="$tool/bin/uv"
fi

if [ "$mode" = wheel ]; then
  src="$2" out="$3"
  "$uv" build --quiet --wheel --out-dir "$out" "$src"
  exit 0
fi

lock="$2"; shift 2
"$uv" pip sync --quiet --require-hashes --python "$py" "$lock"
[ $# -eq 0 ] || "$uv" pip install --quiet --python "$py" --no-deps "$@"
"$uv" pip check --python "$py" || { echo "$lock is incomplete or inconsistent: add what is named \
above to setup.cfg or requirements/*.in and run make lock (the lock is installed as it is, \
without resolving: nothing unpinned is ever installed)" >&2; exit 1; }
