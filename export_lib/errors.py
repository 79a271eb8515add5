"""The one exception hierarchy of export_lib.

Every error a user can see is an :class:`ExportError`. ``retryable`` tells the Airflow edge
whether a retry can help (a source that is down) or not (a config mistake, a fencing loss):
operators turn non-retryable errors into ``AirflowFailException`` so no retry storm follows.
Never define exception classes in other modules.
"""

from __future__ import annotations

from datetime import datetime


class ExportError(Exception):
    """Base of every export error. ``retryable`` is False unless a subclass says otherwise."""

    retryable: bool = False


class ConfigError(ExportError):
    """A configuration file or value is wrong. The message names file, field, value and the fix.

    ``issues`` holds every problem found (``file: field.path: message`` lines), so a whole
    directory is reported at once.
    """

    def __init__(self, message: str, issues: list[str] | None = None) -> None:
        super().__init__(message)
        self.issues: list[str] = list(issues) if issues else [message]


class FormError(ConfigError):
    """A value typed into one of the export pages' forms is wrong: ``field`` names the form
    field, the message its bad value and the fix. Nothing was changed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class UnknownFormatError(ConfigError):
    """No output format of that name is built in or installed (``export_lib.formats`` entry
    points); the message lists the ones that are."""

    def __init__(self, name: str, installed: list[str]) -> None:
        super().__init__(
            f"unknown output format {name!r}; the installed formats are "
            f"{', '.join(installed)}. Use one of them, or install the package that registers "
            f"{name!r} under the export_lib.formats entry point group")
        self.name = name
        self.installed = installed


class WindowError(ExportError):
    """A slot or reporting window cannot be resolved (e.g. a slot that is not on the schedule)."""


class ConnectionLookupError(ExportError):
    """A connection could not be looked up (the store behind a resolver is unreachable, e.g. a
    secrets backend). Retryable; an unknown connection id is a ConfigError instead."""

    retryable = True


class SourceError(ExportError):
    """The source database cannot be read. Retryable: the source may come back."""

    retryable = True


class SchemaDriftError(ExportError):
    """The source no longer matches the config (a column was dropped). Not retryable."""


class SchemaContractError(SchemaDriftError):
    """The file's schema differs from the schedule's published contract under ``schema_policy:
    fail`` (ADR 0025): nothing is published. The message is the diff, one change per line
    (added, removed, retyped and nullability columns, old → new), and the fix; ``diff`` holds
    those lines. Not retryable: a retry compares against the same contract."""

    def __init__(self, message: str, *, diff: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.diff = diff


class RenderError(ExportError):
    """Rendering the artifact failed for a reason a retry will not fix."""


class ArtifactValidationError(ExportError):
    """A staged artifact failed validation (checksum, row count, columns); nothing is published."""


class LedgerError(ExportError):
    """The run ledger cannot be reached or answered unexpectedly. Retryable."""

    retryable = True


class LedgerUnavailable(LedgerError):
    """The ledger's host did not let us in or did not answer in time (down, unreachable, or
    past its connect or read timeout). The message names the host (masked) and what was waited
    for. Retryable: the host may come back."""


class RenderBudgetError(ExportError):
    """The render budget (source queries at once, globally and per company) is full. Retryable:
    the Airflow edge reschedules the render, nothing was claimed or changed."""

    retryable = True


class LeaseHeldError(ExportError):
    """Another attempt holds the run's lease (it renews it while it renders, and keeps it
    until it publishes): this attempt stands down, nothing was claimed or changed. Retryable:
    a retry takes over once that lease lapses (its worker was killed) or finds the run ready.
    ``until`` (aware UTC) is when the lease runs out unless renewed."""

    retryable = True

    def __init__(self, message: str, *, until: datetime) -> None:
        super().__init__(message)
        self.until = until


class IllegalTransitionError(ExportError):
    """A run was asked to move between states the state machine does not allow."""


class PublishError(ExportError):
    """An artifact could not be published."""


class FencingError(PublishError):
    """A stale attempt tried to publish after a newer attempt claimed the run."""


class StorageError(ExportError):
    """An object store could not be read or written. Retryable."""

    retryable = True


STORAGE_FULL_PREFIX = "storage full: "
"""How a :class:`StorageFull` message starts; the ledger keeps it as the run's reason, so the
views (``exportctl runs``/``explain``, the company page) can say the run waits on storage."""


class StorageFull(StorageError):
    """The volume under a render (the local artifact store's, or the temp directory a spool
    file lives in) is full or its quota spent (ENOSPC, EDQUOT). The message names the volume,
    the bytes written so far and the fix; the partial file is removed, nothing is published.
    Retryable: the retry after space is freed renders the period again. ``path`` is the file
    that could not be written, ``written`` its bytes so far."""

    def __init__(self, message: str, *, path: str, written: int) -> None:
        super().__init__(message)
        self.path = path
        self.written = written


class DeliveryError(ExportError):
    """A delivery failed. ``retryable`` says whether the destination may accept a retry;
    ``retry_until`` (aware UTC, or None) is when its retry window closes, so the edge can land
    its last retry there."""

    def __init__(self, message: str, *, retryable: bool = False,
                 retry_until: datetime | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_until = retry_until


class AuthorizationError(ExportError):
    """The run's owner is no longer authorised for the company. Not retryable."""


class ActionTokenError(ExportError):
    """An operator action's form token is missing, forged, for another user or run, expired,
    or cannot be made because no secret is configured. Nothing was changed."""


class RunHeldError(ExportError):
    """A run started after its deadline under ``late_start: hold`` waits for an operator."""


class OrchestratorError(ExportError):
    """Airflow's REST API could not be reached or answered unexpectedly (a backfill request of
    catch-up or the gap audit). Retryable: the API server may come back; refused credentials
    are a ConfigError naming the connection instead."""

    retryable = True


class OrchestratorTimeout(OrchestratorError):
    """The REST API did not answer within the request's timeout. The server may still be
    working on it, so a caller asks again later (the next scheduled run, the next audit)
    rather than at once: retrying now piles a second request onto a busy api-server."""
