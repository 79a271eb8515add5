"""A throwaway PostgreSQL server: ``initdb`` + ``pg_ctl`` on a free loopback port.

PostgreSQL refuses to run as root, so when the session is root the data directory is owned
by the ``postgres`` system user and the server commands run as that user. Used by the test
session (``postgres_server`` fixture) and by ``bench/render.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.services.ports import free_port, wait_for_port

INSTALL_HINT = "apt-get update && apt-get install -y postgresql"


def _pg_bin(name: str) -> str:
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(f"PostgreSQL's {name} was not found; install it with: {INSTALL_HINT}")


@dataclass
class PostgresServer:
    port: int
    datadir: Path
    user: str = "exports"
    password: str = "exports"
    database: str = "exports"
    options: str = ""  # the server's `pg_ctl -o` (resume_postgres starts it the same way)

    @property
    def dsn(self) -> str:
        return (
            f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"
        )

    @property
    def sqlalchemy_url(self) -> str:
        return self.dsn.replace("postgresql://", "postgresql+psycopg://", 1)

    def to_json(self) -> str:
        """What another process needs to use (and stop) this server: :meth:`from_json`."""
        return json.dumps({**dataclasses.asdict(self), "datadir": str(self.datadir)})

    @classmethod
    def from_json(cls, text: str) -> PostgresServer:
        fields = json.loads(text)
        return cls(**{**fields, "datadir": Path(fields["datadir"])})


def _run_as_owner(args: list[str], owner: str | None) -> None:
    if owner:
        args = ["runuser", "-u", owner, "--", *args]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_postgres(extra_options: str = "") -> PostgresServer:
    """Create a cluster in a fresh temp dir, start it, create the ``exports`` role and DB.

    :param extra_options: more ``postgres`` options, e.g. ``-c log_statement=all``
    """
    owner = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="export-pg-"))
    datadir = root / "data"
    pwfile = root / "pw"
    pwfile.write_text("exports\n")
    if owner:
        uid = pwd.getpwnam(owner).pw_uid
        os.chown(root, uid, -1)
        os.chown(pwfile, uid, -1)
    port = free_port()
    _run_as_owner(
        [_pg_bin("initdb"), "-D", str(datadir), "-U", "exports", "--pwfile", str(pwfile),
         "-A", "md5", "-E", "UTF8", "--no-locale"],
        owner,
    )
    # 500 connections: the test session's server carries every Airflow stack of the run
    # (two shared stacks, the tenants stack and the cluster at once, each with its pools).
    options = (f"-p {port} -h 127.0.0.1 -k {root} -c fsync=off -c full_page_writes=off "
               f"-c max_connections=500 {extra_options}").strip()
    server = PostgresServer(port=port, datadir=datadir, options=options)
    resume_postgres(server)
    import psycopg

    with psycopg.connect(server.dsn.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE exports")
    return server


def resume_postgres(server: PostgresServer) -> None:
    """Start the server (again) with its options; its log is ``server.log`` beside the data."""
    owner = "postgres" if os.geteuid() == 0 else None
    _run_as_owner(
        [_pg_bin("pg_ctl"), "-D", str(server.datadir), "-w", "-l",
         str(server.datadir.parent / "server.log"), "-o", server.options, "start"],
        owner,
    )
    wait_for_port(server.port, what="PostgreSQL")


def pause_postgres(server: PostgresServer) -> None:
    """``pg_ctl stop -m fast``: every session is ended, the data stays (resume_postgres)."""
    owner = "postgres" if os.geteuid() == 0 else None
    _run_as_owner([_pg_bin("pg_ctl"), "-D", str(server.datadir), "-w", "-m", "fast", "stop"],
                  owner)


def stop_postgres(server: PostgresServer) -> None:
    owner = "postgres" if os.geteuid() == 0 else None
    try:
        _run_as_owner([_pg_bin("pg_ctl"), "-D", str(server.datadir), "-m", "fast", "stop"], owner)
    finally:
        shutil.rmtree(server.datadir.parent, ignore_errors=True)


@contextmanager
def scratch_database(server: PostgresServer, prefix: str = "db",
                     template: str | None = None) -> Iterator[str]:
    """A fresh database on ``server`` for the block (a copy of ``template``, else empty);
    yields its libpq DSN, dropped after (``WITH (FORCE)``: a stack's leftover connections do
    not keep it)."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield server.dsn.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


_templates: set[tuple[int, str]] = set()  # (server port, name): built or found, this process


def template_database(server: PostgresServer, name: str, build: Callable[[str], None]) -> str:
    """The template database ``name`` on ``server``, built once per server by ``build(dsn)``
    (every xdist worker shares the server): copying it is ~0.02 s of the server's CPU where
    building a database again may cost ten times that (the ledger's migrations: ~0.2 s of
    DDL each, 5 Dec). Under an advisory lock, one builder per server; marked ``IS_TEMPLATE``
    and closed to connections once complete (``CREATE DATABASE … TEMPLATE`` fails while
    anyone is connected to it); a leftover of an interrupted build is built again. Asked once
    per process and server (a test asks each time)."""
    import psycopg

    if (server.port, name) in _templates:
        return name
    with psycopg.connect(server.dsn.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
        try:
            row = conn.execute("SELECT datistemplate FROM pg_database WHERE datname = %s",
                               (name,)).fetchone()
            if not (row and row[0]):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')
                build(server.dsn.rsplit("/", 1)[0] + f"/{name}")
                conn.execute(f'ALTER DATABASE "{name}" IS_TEMPLATE true ALLOW_CONNECTIONS false')
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
    _templates.add((server.port, name))
    return name
