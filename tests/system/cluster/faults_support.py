"""What the cluster fault tests share: a sampler of the export queries a source runs, the
source scans its statement log shows, and SIGKILLing a component of the cluster."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from tests.system.soak.stack import wait_for

RENDER_APP = "export_lib render "
# A source server that logs every statement with its backend pid and application name
# (start_postgres(extra_options=SCAN_LOG_OPTIONS)); scans() reads the COPYs back.
SCAN_LOG_OPTIONS = "-c log_statement=all -c log_line_prefix='%p|%a|'"


class SourceSampler:
    """Export queries on a source, sampled from pg_stat_activity every 50 ms. Survives the
    source going away (it reconnects, and counts the samples it could not take)."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.samples, self.scans = dsn, [], Counter()
        # company -> the timestamp literals (window bounds) of each scan's query, so a test
        # can count the scans of its own period apart from on-time runs firing meanwhile.
        self.windows: dict[str, list[frozenset[datetime]]] = {}
        self.missed = 0
        self._seen: set = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def active(self, company: str) -> int:
        return self.samples[-1][company] if self.samples else 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                    conn.execute("SET log_statement = 'none'")  # the sampler is not a scan
                    self._sample(conn)
            except psycopg.Error:
                self.missed += 1
                time.sleep(0.2)

    def _sample(self, conn: psycopg.Connection) -> None:
        while not self._stop.is_set():
            rows = conn.execute(
                "SELECT pid, query_start, application_name, query FROM pg_stat_activity "
                f"WHERE state = 'active' AND application_name LIKE '{RENDER_APP}%' "
                # its own database: the session's server also carries other stacks' sources
                "AND datname = current_database()").fetchall()
            self.samples.append(Counter(app.rsplit(" ", 1)[-1] for _, _, app, _ in rows))
            for pid, start, app, query in rows:
                if (pid, start) not in self._seen:
                    self._seen.add((pid, start))
                    company = app.rsplit(" ", 1)[-1]
                    self.scans[company] += 1
                    self.windows.setdefault(company, []).append(
                        frozenset(_utc(t) for t in _TIMESTAMP.findall(query)))
            time.sleep(0.05)

    def peaks(self) -> tuple[int, int]:
        """The most export queries seen at once, in all and of one company."""
        return (max((sum(s.values()) for s in self.samples), default=0),
                max((max(s.values(), default=0) for s in self.samples), default=0))

    def __enter__(self) -> SourceSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


_RECORD = re.compile(r"^(\d+)\|([^|]*)\|(.*)$")
_TIMESTAMP = re.compile(r"'(\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:[+-]\d\d(?::?\d\d)?|Z)?)'")


def scans(log: Path) -> list[tuple[str, frozenset[datetime], bool]]:
    """Every export COPY the source's statement log shows (SCAN_LOG_OPTIONS): the company (the
    render's application name), the timestamp literals of its query (window bounds), and
    whether the server's shutdown ended it (the next line of its backend is the FATAL
    "terminating connection due to administrator command" of ``pg_ctl stop -m fast``)."""
    records: list[list[str]] = []
    for line in log.read_text(errors="replace").splitlines():
        match = _RECORD.match(line)
        if match:
            records.append([match[1], match[2], match[3]])
        elif records:  # a continuation line of a multi-line statement
            records[-1][2] += "\n" + line
    found, open_copy = [], {}
    for pid, app, text in records:
        if pid in open_copy:
            index = open_copy.pop(pid)
            if "terminating connection due to administrator command" in text:
                found[index] = (*found[index][:2], True)
        if app.startswith(RENDER_APP) and "statement: COPY" in text:
            open_copy[pid] = len(found)
            found.append((app.removeprefix(RENDER_APP), frozenset(
                _utc(t) for t in _TIMESTAMP.findall(text)), False))
    return found


def _utc(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def sigkill_component(cluster, name: str) -> None:
    """SIGKILL a component and every process under it (a lost host); the supervisor restarts
    the component."""
    pid = cluster.status()["components"][name]["pid"]
    for p in descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: cluster.status()["components"][name]["pid"] not in (None, pid)
             and cluster.status()["components"][name]["state"] == "up", 120, 1,
             what=f"{name} to be restarted")
