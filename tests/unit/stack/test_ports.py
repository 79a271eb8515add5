"""scripts/ports.py and scripts/pg.sh's port check: a port ``make run`` picked (the first free
from 5432) that another server takes between the pick and the bind — a second PostgreSQL
starting at the same moment — moves to the next free port, saying so, a bounded number of
times; a port the user chose never moves. Real listening sockets and real processes binding
them stand for the other server and for PostgreSQL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PORTS = REPO / "scripts" / "ports.py"
sys.path.insert(0, str(REPO / "scripts"))
from ports import first_free, is_free  # noqa: E402

# A "server": binds 127.0.0.1:PORT and listens (exit 1 with "Address already in use" when
# taken), then records the port it got in FILE.
SERVER = ("import socket, sys\n"
          "s = socket.socket()\n"
          "s.bind(('127.0.0.1', int(sys.argv[1])))\n"
          "s.listen()\n"
          "open(sys.argv[2], 'w').write(sys.argv[1])\n")


@contextmanager
def taken(port: int) -> Iterator[socket.socket]:
    """Another server listening on ``port`` (on every interface, as PostgreSQL's would)."""
    with socket.socket() as other:
        other.bind(("0.0.0.0", port))
        other.listen()
        yield other


def ports(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PORTS), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=60, check=False)


@pytest.fixture()
def picked() -> int:
    """A port picked the way airflow-env.sh picks PGPORT (free now; maybe not in a moment)."""
    port = first_free(20000 + os.getpid() % 20000)
    assert port is not None and is_free(port)
    return port


def test_a_port_taken_between_pick_and_bind_moves_to_the_next_free_one(tmp_path, picked):
    bound = tmp_path / "bound"
    with taken(picked):  # the other server binds after our pick, before our start
        result = ports("start", str(picked), "5", sys.executable, "-c", SERVER, "{port}",
                       str(bound))
    assert result.returncode == 0, result.stderr
    moved = int(result.stdout)
    assert moved > picked and bound.read_text() == str(moved)
    assert (f"Port {picked} was taken by the time the server started (another server starting "
            f"at the same moment?); moving to port {moved}") in result.stderr


def test_a_free_port_starts_where_it_was_picked_and_says_nothing(tmp_path, picked):
    bound = tmp_path / "bound"
    result = ports("start", str(picked), "5", sys.executable, "-c", SERVER, "{port}", str(bound))
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{picked}\n", "")
    assert bound.read_text() == str(picked)


def test_a_port_the_user_chose_never_moves(tmp_path, picked):
    with taken(picked):
        result = ports("start", str(picked), "0", sys.executable, "-c", SERVER, "{port}",
                       str(tmp_path / "bound"))
    assert (result.returncode, result.stdout) == (1, "")
    assert "Address already in use" in result.stderr
    assert f"Port {picked} is already in use, so the server cannot start there; pick another" \
        in result.stderr
    assert not (tmp_path / "bound").exists()


def test_a_start_failing_for_another_reason_is_not_retried(tmp_path, picked):
    result = ports("start", str(picked), "5", sys.executable, "-c",
                   "import sys; sys.exit('no data directory')", "{port}")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "no data directory\n"  # its own words, no port move


def test_the_moves_are_bounded(tmp_path, picked):
    """Every port tried is taken by the time the start runs (a server that binds it and then
    fails stands for a race lost each time): two moves, then it gives up, naming the port."""
    grabbers = tmp_path / "grabbers"
    lose = ("import socket, subprocess, sys\n"
            "port = sys.argv[1]\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import socket, time; s = "
            "socket.socket(); s.bind((\"0.0.0.0\", ' + port + ')); s.listen(); time.sleep(60)'],\n"
            "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "open(sys.argv[2], 'a').write(f'{child.pid}\\n')\n"
            "import time\n"
            "for _ in range(100):\n"
            "    probe = socket.socket()\n"
            "    try:\n"
            "        probe.bind(('127.0.0.1', int(port)))\n"
            "    except OSError:\n"
            "        break\n"
            "    finally:\n"
            "        probe.close()\n"
            "    time.sleep(0.05)\n"
            "sys.exit('could not bind: Address already in use')\n")
    try:
        result = ports("start", str(picked), "2", sys.executable, "-c", lose, "{port}",
                       str(grabbers))
    finally:
        for pid in grabbers.read_text().split():
            os.kill(int(pid), 9)
    assert (result.returncode, result.stdout) == (1, "")
    moves = [line for line in result.stderr.splitlines() if "moving to port" in line]
    assert len(moves) == 2 and len(grabbers.read_text().split()) == 3
    last = int(moves[-1].rsplit(" ", 1)[1])
    assert f"Port {last} is already in use, so the server cannot start there (moved 2 time(s) " \
           "already); pick another" in result.stderr


def _pg_port_check(tmp_path: Path, port: int, picked_here: bool) -> subprocess.CompletedProcess:
    """scripts/pg.sh's pg_port_check in bash, with the variables airflow-env.sh would set."""
    state = tmp_path / "run.env"
    state.write_text(f"DB=postgres\nPORT=8080\nPGPORT={port}\n")
    script = (f'source "{REPO}/scripts/pg.sh"\n'
              "pg_port_check || exit $?\n"
              'echo "PGPORT=$PGPORT"\necho "LEDGER=$EXPORT_LEDGER_URL"\n'
              'echo "DEMO=$AIRFLOW_CONN_DEMO_SOURCE"\n')
    env = {"PATH": os.environ["PATH"], "ROOT": str(REPO), "PY": sys.executable,
           "PGPORT": str(port), "PGPORT_PICKED": "1" if picked_here else "",
           "RUN_STATE": str(state), "PG_SERVER": "local",
           "EXPORT_LEDGER_URL": f"postgresql+psycopg://exports:exports@127.0.0.1:{port}/exports",
           "AIRFLOW_CONN_DEMO_SOURCE": "postgresql://elsewhere:5/demo"}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_make_run_follows_a_picked_port_taken_meanwhile(tmp_path, picked):
    with taken(picked):
        result = _pg_port_check(tmp_path, picked, picked_here=True)
    assert result.returncode == 0, result.stderr
    moved = first_free(picked + 1)
    assert moved is not None
    assert result.stdout.splitlines() == [
        f"==> Port {picked} was taken after it was picked (another server starting?); "
        f"PostgreSQL moves to port {moved}",
        f"PGPORT={moved}",
        f"LEDGER=postgresql+psycopg://exports:exports@127.0.0.1:{moved}/exports",
        "DEMO=postgresql://elsewhere:5/demo"]  # a URL of another server is left alone
    assert f"PGPORT={moved}\n" in (tmp_path / "run.env").read_text()


def test_make_run_keeps_a_port_the_user_chose_and_says_which_to_pick(tmp_path, picked):
    with taken(picked):
        result = _pg_port_check(tmp_path, picked, picked_here=False)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(f"Port {picked} is already in use, so PostgreSQL cannot "
                                    "start there; pick another: make run PGPORT=")
    assert f"PGPORT={picked}\n" in (tmp_path / "run.env").read_text()
