#!/usr/bin/env bash
# The install steps shared by `make venv`, `make dist` and the image (Dockerfile), so the image's
# steps are the ones tests/system/deploy/test_install.py runs in a fresh venv (no Docker engine is
# needed to prove them). Python: $PYTHON (default `python`); uv: the version the lock pins,
# installed with that Python's pip when missing (the stock Airflow image has pip).
#
#   scripts/install.sh wheel SRC OUT       build SRC's wheel into OUT (setuptools as pinned in
#                                         pyproject.toml)
#   scripts/install.sh lock LOCK [ARG...]  make the environment exactly LOCK (uv pip sync: no
#                                         dependency resolution, and what LOCK does not pin is
#                                         removed, e.g. the base image's other providers), then
#                                         install ARG... without dependencies (the wheel, or
#                                         `-e .`), then check: a package missing from LOCK fails
#                                         here with its name, nothing unpinned is ever installed
set -euo pipefail
py="${PYTHON:-python}"
mode="${1:-}"
if ! { [ "$mode" = wheel ] && [ $# -eq 3 ]; } && ! { [ "$mode" = lock ] && [ $# -ge 2 ]; }; then
  echo "usage: scripts/install.sh wheel SRC OUT | lock LOCK [ARG...] (got: $*)" >&2; exit 2
fi

lock_for_uv="$2"
[ "$mode" = wheel ] && lock_for_uv="$(dirname "$0")/../requirements.txt"
uv_version="$(sed -n 's/^uv==//p' "$lock_for_uv")"
[ -n "$uv_version" ] || { echo "$lock_for_uv pins no uv (a line uv==<version>): add it" >&2; exit 2; }
scripts="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
uv="$scripts/uv"
if [ "$("$uv" --version 2>/dev/null | cut -d' ' -f2)" != "$uv_version" ]; then
  "$py" -m pip install --quiet --disable-pip-version-check --no-deps "uv==$uv_version"
fi

if [ "$mode" = wheel ]; then
  src="$2" out="$3"
  "$uv" build --quiet --wheel --out-dir "$out" "$src"
  exit 0
fi

lock="$2"; shift 2
"$uv" pip sync --quiet --python "$py" "$lock"
[ $# -eq 0 ] || "$uv" pip install --quiet --python "$py" --no-deps "$@"
"$uv" pip check --python "$py" || { echo "$lock is incomplete or inconsistent: pin each package \
named above with == (the lock is installed as it is, without resolving: nothing unpinned is ever \
installed)" >&2; exit 1; }
