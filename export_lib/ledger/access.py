"""What every ledger repository object shares: the engine, transactions that turn driver
errors into LedgerError (with the URL masked), and the schema check/upgrade.

Split out of runs.py so the run repository stays about runs (and under ~400 lines).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection
from sqlalchemy.engine import Engine
from sqlalchemy.exc import InterfaceError, OperationalError

from export_lib.errors import LedgerError
from export_lib.ledger.database import masked
from export_lib.ledger.reconnect import ledger_error
from export_lib.logfmt import get_logger, note_status

log = get_logger(__name__)
# Connection.info key: (run key, state) of each run a transaction moved.
MOVED = "export_moved_runs"


class LedgerAccess:
    """The ledger's engine and URL, its transactions, and its schema revision."""

    def __init__(self, engine: Engine, url: str = "") -> None:
        self.engine = engine
        self.url = url or str(engine.url)

    # -- schema ---------------------------------------------------------------------------
    def upgrade(self) -> tuple[str | None, str | None]:
        """Bring the schema to the newest Alembic revision (idempotent); (before, after).
        A ledger a newer release migrated is refused, never downgraded."""
        from export_lib.ledger.migrations import upgrade

        try:
            return upgrade(self.engine)
        except (OperationalError, InterfaceError) as exc:
            raise ledger_error(self.url, exc) from exc

    def ensure_schema(self) -> None:
        """Make sure the tables exist at the newest revision before a command uses them.

        The embedded SQLite ledger is upgraded on the spot (so ``exportctl run`` works on a
        fresh checkout); a server database is never migrated implicitly — two workers racing
        on DDL, or a migration nobody reviewed, is worse than a clear error.
        """
        from export_lib.ledger.migrations import current, head, newer_than_package

        try:
            have, want = current(self.engine), head()
        except (OperationalError, InterfaceError) as exc:
            raise ledger_error(self.url, exc) from exc
        if have == want:
            return
        refusal = newer_than_package(have, masked(self.url))
        if refusal:
            raise LedgerError(refusal)
        if self.engine.dialect.name == "sqlite":
            log.info("upgrading the embedded ledger %s from %s to %s", masked(self.url), have, want)
            self.upgrade()
            return
        raise LedgerError(
            f"the export ledger at {masked(self.url)} is at schema revision {have or 'none'}, "
            f"this code needs {want}: run 'exportctl ledger upgrade' with the same "
            "EXPORT_LEDGER_URL first"
        )

    def agreed_now(self, now: datetime) -> datetime:
        """The earlier of ``now`` and the database's clock (export_lib.ledger.clock): the
        moment a decision that closes something is taken at."""
        from export_lib.ledger.clock import agreed_now
        from export_lib.ledger.reconnect import reconnecting

        def read() -> datetime:
            with self._read() as conn:
                return agreed_now(conn, now)

        return reconnecting(read, what="ledger clock")

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One transaction; a ledger that went away is LedgerUnavailable (one line). The runs
        it moved (``Ledger._move``) reach the log lines' ``status`` once it committed: a
        rolled-back move never shows."""
        moved: list[tuple[str, str]] = []
        try:
            with self.engine.begin() as conn:
                conn.info[MOVED] = moved
                try:
                    yield conn
                finally:
                    # info belongs to the pooled DBAPI connection: never left for its next user.
                    conn.info.pop(MOVED, None)
        except (OperationalError, InterfaceError) as exc:
            raise ledger_error(self.url, exc) from exc
        for run_key, state in moved:
            note_status(run_key, state)

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                yield conn
        except (OperationalError, InterfaceError) as exc:
            raise ledger_error(self.url, exc) from exc

