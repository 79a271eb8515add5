"""`make run` refuses bad input in one line naming the fix, and deletes nothing."""

from __future__ import annotations

import socket

from tests.services.ports import free_port
from tests.system.soak.stack import Stack


def our_lines(stderr: str) -> list[str]:
    """stderr without make's own "make: *** … Error 1" trailer."""
    return [line for line in stderr.splitlines() if line and not line.startswith("make")]


def occupy(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_ui_port_taken_is_one_line_with_the_override(project_copy: Stack):
    with occupy(project_copy.port):
        result = project_copy.make("run", timeout=120)
    assert result.returncode != 0
    lines = our_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Port {project_copy.port} is already in use")
    assert "make run PORT=" in lines[0]
    assert not (project_copy.root / ".airflow" / "pg").exists()
    assert not (project_copy.run_dir / "supervisor.pid").exists()


def test_postgres_port_taken_is_one_line_with_the_override(project_copy: Stack):
    with occupy(project_copy.pgport):
        result = project_copy.make("run", timeout=120)
    assert result.returncode != 0
    lines = our_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Port {project_copy.pgport} is already in use, so PostgreSQL")
    assert "make run PGPORT=" in lines[0]
    assert not (project_copy.run_dir / "supervisor.pid").exists()


def test_data_directory_of_another_major_version_is_refused_and_kept(project_copy: Stack):
    pg = project_copy.root / ".airflow" / "pg"
    (pg / "base").mkdir(parents=True)
    (pg / "PG_VERSION").write_text("13\n")
    (pg / "base" / "precious").write_text("someone's data")

    for target in ("run", "setup"):
        result = project_copy.make(target, timeout=120)
        assert result.returncode != 0
        lines = our_lines(result.stderr)
        assert len(lines) == 1, result.stderr
        assert "created by PostgreSQL 13" in lines[0] and "'make reset-db'" in lines[0]
        assert (pg / "base" / "precious").read_text() == "someone's data"
        assert not (project_copy.run_dir / "supervisor.pid").exists()

    result = project_copy.make("reset-db", timeout=120)
    assert result.returncode == 0, result.stderr
    assert not pg.exists()


def test_unknown_db_choice_is_refused(project_copy: Stack):
    result = project_copy.make("run", DB="mysql", timeout=120)
    assert result.returncode != 0
    assert our_lines(result.stderr) == [
        "DB=mysql is not a choice; use make run DB=postgres (the default) or DB=sqlite"]


def test_pg_server_that_is_not_a_server_url_is_refused(project_copy: Stack):
    result = project_copy.make("run", PG_SERVER="localhost:5432", timeout=120)
    assert result.returncode != 0
    assert our_lines(result.stderr) == [
        "PG_SERVER=localhost:5432 is not a server URL; use "
        "PG_SERVER=postgresql://user:password@host:port"]


def test_pg_db_prefix_must_be_plain(project_copy: Stack):
    result = project_copy.make("run", PG_DB_PREFIX="Stack-1", timeout=120)
    assert result.returncode != 0
    assert our_lines(result.stderr) == [
        "PG_DB_PREFIX=Stack-1 is not a choice: lower-case letters, digits and _ only (at most 40)"]


def test_unreachable_pg_server_is_named_without_its_password(project_copy: Stack):
    port = free_port()  # nobody listens there
    result = project_copy.make("run", PG_SERVER=f"postgresql://exports:s3cret@127.0.0.1:{port}",
                               timeout=120)
    assert result.returncode != 0
    lines = our_lines(result.stderr)
    assert lines[0] == f"Cannot reach PG_SERVER=postgresql://exports:***@127.0.0.1:{port}:"
    assert "s3cret" not in result.stdout + result.stderr
    assert not (project_copy.root / ".airflow" / "pg").exists()  # no initdb
    assert not (project_copy.run_dir / "supervisor.pid").exists()
