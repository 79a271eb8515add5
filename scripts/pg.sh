# The local PostgreSQL cluster of `make run` (sourced after airflow-env.sh). Data in
# .airflow/pg; server commands run as `postgres` when we are root. Under `make run` the
# supervisor (scripts/supervise.py) runs the server; `make setup` starts it only for as long as
# it needs it. With PG_SERVER (an existing server, see airflow-env.sh) none of the cluster
# functions is used: only the databases' (pg_create_databases, pg_drop_databases).

pg_external() { [ "$PG_SERVER" != local ]; }

pg_as_owner() {
  # From /: the project may be a directory the owner cannot enter.
  if [ -n "$PG_OWNER" ]; then (cd / && runuser -u "$PG_OWNER" -- "$@"); else "$@"; fi
}

pg_installed_major() { basename "$(dirname "$PG_BIN")"; }

# Where the cluster lives when $PG_OWNER cannot reach the project (pg_init): in its home, one
# directory per state directory, so `make run` (.airflow) and `make cluster` (.airflow-cluster)
# of one checkout never share a cluster.
pg_relocated_dir() {
  local home; home="$(getent passwd "$PG_OWNER" | cut -d: -f6)"
  printf '%s/airflow-scheduled-exports/%s\n' "$home" "$(printf %s "$AIRFLOW_HOME" | sha1sum | cut -c1-12)"
}

# Refuse a data directory written by another PostgreSQL major version (never delete it here).
pg_check_version() {
  if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
    echo "PostgreSQL server binaries are missing (/usr/lib/postgresql/*/bin); install them with: bash scripts/ensure-debian-packages.sh (or make run DB=sqlite)" >&2
    return 1
  fi
  if [ -f "$PG_DATA/PG_VERSION" ]; then
    local have; have="$(cat "$PG_DATA/PG_VERSION")"
    if [ "$have" != "$(pg_installed_major)" ]; then
      echo "$PG_DATA was created by PostgreSQL $have but this machine runs PostgreSQL $(pg_installed_major); 'make reset-db' deletes it (Airflow metadata, ledger and demo data) and the next 'make run' starts fresh" >&2
      return 1
    fi
  elif [ -d "$PG_DATA" ] && [ -n "$(ls -A "$PG_DATA" 2>/dev/null)" ]; then
    echo "$PG_DATA is not a PostgreSQL data directory (no PG_VERSION); 'make reset-db' deletes it and the next 'make run' starts fresh" >&2
    return 1
  fi
}

# Point this stack at the cluster's new port $2 (was $1): PGPORT, every variable naming the old
# one (the Airflow, ledger and demo URLs) and run.env when setup has written it.
pg_repoint() {
  local old="$1" new="$2" var
  for var in $(compgen -e); do
    if [[ "${!var}" == *"@127.0.0.1:$old/"* ]]; then
      export "$var=${!var//@127.0.0.1:$old\//@127.0.0.1:$new/}"
    fi
  done
  PGPORT="$new"
  export PGPORT
  if [ -f "$RUN_STATE" ]; then sed -i "s/^PGPORT=.*/PGPORT=$new/" "$RUN_STATE"; fi
}

# The port must be free. One this run picked (PGPORT_PICKED: the first setup) that another
# server took after the pick (a second PostgreSQL starting at the same moment) moves to the next
# free port, at most PG_PORT_MOVES times, each said; one the user chose or the last setup
# remembered never moves.
PG_PORT_MOVES=5
pg_port_check() {
  local moves=0 next
  while ! "$PY" "$ROOT/scripts/ports.py" free "$PGPORT"; do
    next="$("$PY" "$ROOT/scripts/ports.py" first-free $((PGPORT + 1)) 2>/dev/null || echo 5440)"
    if [ -z "$PGPORT_PICKED" ] || [ "$moves" -ge "$PG_PORT_MOVES" ]; then
      echo "Port $PGPORT is already in use, so PostgreSQL cannot start there; pick another: make run PGPORT=$next" >&2
      return 1
    fi
    echo "==> Port $PGPORT was taken after it was picked (another server starting?); PostgreSQL moves to port $next"
    pg_repoint "$PGPORT" "$next"
    moves=$((moves + 1))
  done
}

pg_running() { [ -f "$PG_DATA/PG_VERSION" ] && pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; }

# initdb once: role `exports` (password `exports`), md5 over TCP on 127.0.0.1 only.
pg_init() {
  [ -f "$PG_DATA/PG_VERSION" ] && return 0
  mkdir -p "$PG_DATA"
  local pwfile="$AIRFLOW_HOME/.pgpw"
  echo "$PG_PASSWORD" > "$pwfile"
  if [ -n "$PG_OWNER" ]; then
    chown "$PG_OWNER": "$PG_DATA" "$pwfile"
    if ! pg_as_owner test -w "$PG_DATA"; then
      # The project sits where `postgres` cannot go (e.g. under /root): keep the cluster in
      # postgres's home and link it from .airflow/pg (make reset-db / make clean delete both).
      local elsewhere; elsewhere="$(pg_relocated_dir)"
      rmdir "$PG_DATA"
      if [ -n "$(ls -A "$elsewhere" 2>/dev/null)" ]; then
        # Never initdb over (or adopt) what an earlier checkout here left.
        rm -f "$pwfile"
        echo "$elsewhere holds the cluster of an earlier checkout in $ROOT (its link $AIRFLOW_HOME/pg is gone); 'make reset-db' deletes it and the next 'make run' starts fresh" >&2
        return 1
      fi
      mkdir -p "$elsewhere"
      chown "$PG_OWNER": "$(dirname "$elsewhere")" "$elsewhere"
      ln -s "$elsewhere" "$AIRFLOW_HOME/pg"
      PG_DATA="$elsewhere"
      echo "==> $PG_OWNER cannot reach $ROOT, so the cluster lives in $PG_DATA (linked from ${AIRFLOW_HOME#"$ROOT"/}/pg)"
      mv "$pwfile" "$(dirname "$elsewhere")/.pgpw-$$"   # initdb (as postgres) reads it
      pwfile="$(dirname "$elsewhere")/.pgpw-$$"
    fi
  fi
  chmod 700 "$PG_DATA"
  echo "==> Initialising PostgreSQL $(pg_installed_major) in $PG_DATA"
  if ! pg_as_owner "$PG_BIN/initdb" -D "$PG_DATA" -U "$PG_USER" --pwfile "$pwfile" -A md5 \
      -E UTF8 --no-locale >"$AIRFLOW_HOME/initdb.log" 2>&1; then
    rm -f "$pwfile"; tail -20 "$AIRFLOW_HOME/initdb.log" >&2; return 1
  fi
  rm -f "$pwfile"
  cat >> "$PG_DATA/postgresql.conf" <<CONF

# make run (scripts/pg.sh): loopback only; port and socket directory are given at start.
listen_addresses = '127.0.0.1'
max_connections = 200
synchronous_commit = off
CONF
}

# Start the cluster for setup. A picked port another server binds between the check and this
# start is the same race one step later: ports.py start runs pg_ctl on the next free port then.
pg_start_for_setup() {
  mkdir -p "$RUN_DIR"
  local cmd=("$PG_BIN/pg_ctl" -D "$PG_DATA" -w -t 60 -l "$PG_DATA/setup.log" \
             -o "-p {port} -k $PG_DATA" start) moves=0 port
  [ -z "$PG_OWNER" ] || cmd=(runuser -u "$PG_OWNER" -- "${cmd[@]}")
  [ -z "$PGPORT_PICKED" ] || moves="$PG_PORT_MOVES"
  port="$(cd / && "$PY" "$ROOT/scripts/ports.py" start "$PGPORT" "$moves" "${cmd[@]}")" \
    || { tail -20 "$PG_DATA/setup.log" >&2; return 1; }
  [ "$port" = "$PGPORT" ] || pg_repoint "$PGPORT" "$port"
}

pg_stop() {
  pg_running || return 0
  pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null
}

pg_psql() {
  PGPASSWORD="$PG_PASSWORD" "$PG_BIN/psql" -h 127.0.0.1 -p "$PGPORT" -U "$PG_USER" -X -q -v ON_ERROR_STOP=1 "$@"
}

# psql on the server's maintenance database (`postgres`, or PG_SERVER's path).
pg_psql_admin() {
  if pg_external; then
    local psql="$PG_BIN/psql"
    [ -n "$PG_BIN" ] && [ -x "$psql" ] || psql="$(command -v psql || true)"
    if [ -z "$psql" ]; then
      echo "psql is missing (the PostgreSQL client); install it with: apt-get install postgresql-client" >&2
      return 1
    fi
    "$psql" -X -q -v ON_ERROR_STOP=1 "$@" \
      -d "postgresql://$PG_SERVER_NETLOC/$PG_SERVER_MAINTENANCE_DB$PG_SERVER_QUERY"
  else
    pg_psql -d postgres "$@"
  fi
}

pg_server_masked() { sed -E 's#^([a-z0-9+]+://[^:/@]*):[^@]*@#\1:***@#' <<< "$1"; }

pg_check_server() {
  if ! pg_psql_admin -tAc "SELECT 1" >/dev/null 2>"$AIRFLOW_HOME/pg-server.err"; then
    echo "Cannot reach PG_SERVER=$(pg_server_masked "$PG_SERVER"):" >&2
    cat "$AIRFLOW_HOME/pg-server.err" >&2
    return 1
  fi
  rm -f "$AIRFLOW_HOME/pg-server.err"
}

pg_database_exists() {
  [ -n "$(pg_psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$1'")" ]
}

# The three databases: Airflow's metadata, the export ledger and the demo source
# (${PG_DB_PREFIX}airflow, …). With PG_TEMPLATE_PREFIX a missing one is created as a copy of
# its template (which nobody may be connected to), so the migrations find nothing to do.
PG_DATABASES=(airflow exports demo)
# What `airflow db migrate` and `airflow pools import` left in a metadata database: the Airflow
# release installed and the pools file's checksum. setup.sh writes it on the database (a
# comment) after both ran; a copy of a template that carries the current stamp needs neither
# (PG_AIRFLOW_CURRENT=1), which saves ~10 s of CPU per stack start. An upgraded Airflow or
# changed pools file changes the stamp, and the steps run again.
pg_airflow_stamp() {
  local dist
  dist="$(cd "$ROOT/.venv" 2>/dev/null && ls -d lib/python*/site-packages/apache_airflow-*.dist-info 2>/dev/null | head -1)"
  # "fab": setup migrates FAB's tables too, whatever the auth manager (see setup.sh).
  echo "${dist##*/} pools:$(sha256sum "$ROOT/deploy/pools.json" | cut -c1-16) fab"
}
pg_stamp_of() {
  pg_psql_admin -tAc "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = '$1'"
}
PG_AIRFLOW_CURRENT=
pg_create_databases() {
  local db name template
  for db in "${PG_DATABASES[@]}"; do
    name="$PG_DB_PREFIX$db"
    pg_database_exists "$name" && continue
    if [ -n "$PG_TEMPLATE_PREFIX" ]; then
      template="$PG_TEMPLATE_PREFIX$db"
      if ! pg_database_exists "$template"; then
        echo "PG_TEMPLATE_PREFIX=$PG_TEMPLATE_PREFIX: the template database $template does not exist" >&2
        return 1
      fi
      echo "==> Database $name (a copy of $template)"
      pg_psql_admin -c "CREATE DATABASE \"$name\" TEMPLATE \"$template\"" >/dev/null
      if [ "$db" = airflow ] && [ "$(pg_stamp_of "$template")" = "$(pg_airflow_stamp)" ]; then
        PG_AIRFLOW_CURRENT=1
      fi
    else
      pg_psql_admin -c "CREATE DATABASE \"$name\"" >/dev/null
    fi
  done
}

# On PG_SERVER only (the local cluster is deleted whole): this stack's databases, whoever is
# still connected to them.
pg_drop_databases() {
  local db
  for db in "${PG_DATABASES[@]}"; do
    pg_psql_admin -c "DROP DATABASE IF EXISTS \"$PG_DB_PREFIX$db\" WITH (FORCE)" >/dev/null
  done
}
