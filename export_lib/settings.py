"""Deployment settings: the one module of ``export_lib`` and the Airflow plugins that reads the
process environment.

Each setting is a function named after what it gives. It takes ``environ``, a mapping read
instead of this process's environment (tests; None: ``os.environ``, read at the call, so a
changed variable applies to the next call), and returns a typed value: a path, a URL, a
duration. An empty variable counts as unset. A malformed value is a :class:`ConfigError` naming
the variable, the value and the fix, never a bare ``ValueError`` in a DAG import.

The operational settings (:func:`task_retries` … :func:`catchup_lookback`) are the deployment's
defaults: an export's own ``retries``, ``timeouts``, ``catchup``, ``late_data.poke_interval``
and a destination's ``retry`` win over them (ADR 0015).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from export_lib.errors import ConfigError
from export_lib.logfmt import get_logger

Environ = Mapping[str, str]
log = get_logger(__name__)

# --- Required defaults: retries, timeouts, catch-up, render budget ------------------------
TASK_RETRIES = 11  # 10 min doubling, capped at 1 day: 4.8 days in all (ADR 0003 §6)
RETRY_DELAY = timedelta(minutes=10)
MAX_RETRY_DELAY = timedelta(days=1)
DELIVERY_RETRY_CAP = timedelta(hours=6)  # the base is the retry delay (ADR 0005)
TASK_TIMEOUTS = {
    "resolve": timedelta(minutes=10),
    "sensor": timedelta(minutes=10),  # per poke; the sensor's own timeout bounds the wait
    "render": timedelta(hours=1),  # above the sources' statement_timeout (30 min) + upload
    "publish": timedelta(minutes=30),
    "deliver": timedelta(hours=1),
    "small": timedelta(minutes=5),
}
WATERMARK_POKE_INTERVAL = timedelta(minutes=5)
CATCHUP_LOOKBACK = timedelta(hours=48)
# ADR 0032: more missed periods than this are recovered in batches of BATCH_SIZE periods, each
# batch one task (one process) instead of one DAG run of four task processes per period.
BATCH_THRESHOLD = 8
BATCH_SIZE = 50
RENDER_LEASE = timedelta(minutes=5)
RENDER_BUDGET = 4  # source queries at once (ADR 0003 §5)
RENDER_BUDGET_PER_COMPANY = 2
STATEMENT_TIMEOUT = "30min"
LEDGER_CONNECT_TIMEOUT = 5  # seconds: a dead ledger host holds the scheduler this long at most
LEDGER_RECONNECT = 60  # seconds a ledger call waits for a restarting ledger (a failover: ~30 s)
DELIVERY_HEARTBEAT = 15  # seconds between a delivery attempt's heartbeats
DELIVERY_SILENT_BEATS = 4  # heartbeats missed before another worker takes the attempt over
# Tries of one object-store request (503 SlowDown, 500, a reset connection): botocore's
# standard mode backs off 0-1, 0-2, 0-4, 0-8 s (full jitter) between five tries.
OBJECT_STORE_MAX_ATTEMPTS = 5

# --- Variable names ------------------------------------------------------------------------
RETRIES_ENV = "EXPORT_RETRIES"
RETRY_DELAY_ENV = "EXPORT_RETRY_DELAY_SECONDS"
MAX_RETRY_DELAY_ENV = "EXPORT_MAX_RETRY_DELAY_SECONDS"
DELIVERY_BASE_ENV = "EXPORT_DELIVERY_RETRY_BASE_SECONDS"
DELIVERY_CAP_ENV = "EXPORT_DELIVERY_RETRY_CAP_SECONDS"
TIMEOUT_ENV_PREFIX = "EXPORT_TIMEOUT_"
POKE_ENV = "EXPORT_WATERMARK_POKE_SECONDS"
LOOKBACK_ENV = "EXPORT_CATCHUP_LOOKBACK_HOURS"
BATCH_THRESHOLD_ENV = "EXPORT_BATCH_RECOVERY_THRESHOLD"
BATCH_SIZE_ENV = "EXPORT_BATCH_RECOVERY_SIZE"
RENDER_LEASE_ENV = "EXPORT_RENDER_LEASE_SECONDS"
RENDER_BUDGET_ENV = "EXPORT_RENDER_BUDGET"
RENDER_BUDGET_PER_COMPANY_ENV = "EXPORT_RENDER_BUDGET_PER_COMPANY"
STATEMENT_TIMEOUT_ENV = "EXPORT_SOURCE_STATEMENT_TIMEOUT"
LEDGER_CONNECT_TIMEOUT_ENV = "EXPORT_LEDGER_CONNECT_TIMEOUT_SECONDS"
LEDGER_RECONNECT_ENV = "EXPORT_LEDGER_RECONNECT_SECONDS"
DELIVERY_HEARTBEAT_ENV = "EXPORT_DELIVERY_HEARTBEAT_SECONDS"
OBJECT_STORE_MAX_ATTEMPTS_ENV = "EXPORT_OBJECT_STORE_MAX_ATTEMPTS"
LOG_FORMAT_ENV = "EXPORT_LOG_FORMAT"
DAG_INDEX_ENV = "EXPORT_DAG_INDEX_DIR"
UI_SECRET_ENV = "EXPORT_UI_SECRET"
UI_TOKEN_MINUTES_ENV = "EXPORT_UI_TOKEN_MINUTES"
UI_ALLOW_UNSCOPED_ENV = "EXPORT_UI_ALLOW_UNSCOPED_AUTH"
CONFIG_READ_ONLY_ENV = "EXPORT_CONFIG_READ_ONLY"
UI_TOKEN_TTL = timedelta(hours=1)


@dataclass(frozen=True)
class Variable:
    """One environment variable this module reads: its name, what it sets, its default and the
    values it accepts (the reference page docs/reference/environment.md is generated from
    :data:`VARIABLES`; a test checks every name read below is listed)."""

    name: str
    meaning: str
    default: str
    allowed: str


_SECONDS = "a number of seconds above 0"
VARIABLES: tuple[Variable, ...] = (
    # Where things are
    Variable("EXPORT_HOME", "What the embedded defaults (demo source, SQLite ledger, exports/) "
             "are relative to.", "the working directory", "a directory"),
    Variable("AIRFLOW_HOME", "Airflow's home; the DAG index lives under it unless "
             "EXPORT_DAG_INDEX_DIR is set.", "unset", "a directory"),
    Variable("EXPORT_LEDGER_URL", "The run ledger's database.", "the embedded SQLite ledger",
             "a SQLAlchemy URL, e.g. postgresql+psycopg://user:password@host/exports"),
    Variable(LEDGER_CONNECT_TIMEOUT_ENV, "How long a connection to a PostgreSQL ledger may take "
             "(a connect_timeout in the ledger's URL or connection extras wins); the scheduler "
             "also waits at most this long for the at-risk point's read of the ledger.",
             str(LEDGER_CONNECT_TIMEOUT), "a whole number of seconds, at least 2"),
    Variable(LEDGER_RECONNECT_ENV, "How long a task's call to the ledger keeps reconnecting "
             "(with backoff) to a ledger that went away (a restart, a failover) before it "
             "fails with LedgerUnavailable for Airflow to retry; 0: fail at once.",
             str(LEDGER_RECONNECT), "a whole number of seconds, 0 or more"),
    Variable(DELIVERY_HEARTBEAT_ENV, "How often a worker sending a delivery renews the "
             "attempt's heartbeat in the ledger; an attempt silent for four heartbeats (its "
             "worker died, or gave up on a ledger that was away) is taken over by the next try.",
             str(DELIVERY_HEARTBEAT), "a whole number of seconds, at least 1"),
    Variable("EXPORT_CONFIG_DIR", "The config directory (defaults.yaml and one <company>.yaml "
             "each) when a command names none.", "unset", "a directory"),
    Variable("EXPORT_ARTIFACT_ROOT", "Where published files are stored.",
             "exports/artifacts under EXPORT_HOME",
             "a path, file://…, s3://bucket/prefix or gs://bucket/prefix"),
    Variable("EXPORT_ARTIFACT_CONN", "The connection id of an object-store artifact root.",
             "the store's default connection (aws_default, google_cloud_default)",
             "an Airflow connection id"),
    Variable(OBJECT_STORE_MAX_ATTEMPTS_ENV, "How many times one S3 or GCS request is tried "
             "(the artifact store and the S3/GCS destinations) when the service answers 503 "
             "SlowDown, 500 or 429 or the connection is reset, backing off with jitter in "
             "between (botocore's standard retry mode; for GCS the client's retry, its deadline "
             "the same backoffs); then the task fails for Airflow to retry.",
             str(OBJECT_STORE_MAX_ATTEMPTS), "a whole number, at least 1"),
    Variable("AIRFLOW_CONN_<ID>", "Connection <ID> (upper case) for Airflow and exportctl "
             "alike: sources, destinations, the artifact store.", "unset",
             "a connection URI or JSON"),
    Variable(DAG_INDEX_ENV, "Where DAG loaders keep their index of company files.",
             "AIRFLOW_HOME/export_dag_index", "a directory"),
    Variable("AIRFLOW__CORE__EXECUTOR", "Airflow's executor, as this process has it "
             "(exportctl explain reads it).", "unset", "an Airflow executor name"),
    Variable("AIRFLOW__CELERY__BROKER_URL", "The Celery broker the workers use (exportctl "
             "explain asks it which queues have workers).", "unset", "a broker URL"),
    Variable(LOG_FORMAT_ENV, "How our log lines are written.", "text",
             "text or json (any other value: text, with a warning)"),
    Variable(STATEMENT_TIMEOUT_ENV, "The longest a source query may run (a source "
             "connection's extra wins).", STATEMENT_TIMEOUT,
             "a PostgreSQL duration such as 30min or 900s"),
    # Render lease and budget
    Variable(RENDER_LEASE_ENV, "How long a render's lease lasts before another attempt may "
             "take over.", str(int(RENDER_LEASE.total_seconds())),
             "a whole number of seconds, at least 3"),
    Variable(RENDER_BUDGET_ENV, "Renders reading the sources at once, all companies together.",
             str(RENDER_BUDGET), "a whole number, at least 1"),
    Variable(RENDER_BUDGET_PER_COMPANY_ENV, "Renders of one company reading the sources at "
             "once.", str(RENDER_BUDGET_PER_COMPANY), "a whole number, at least 1"),
    # The export pages
    Variable(UI_SECRET_ENV, "The key signing the export pages' action forms (never shown).",
             "Airflow's [api] secret_key", "any text"),
    Variable(UI_TOKEN_MINUTES_ENV, "How long an action form stays valid.",
             str(int(UI_TOKEN_TTL.total_seconds() // 60)), "a whole number of minutes, 1 to 1440"),
    Variable(UI_ALLOW_UNSCOPED_ENV, "Serve the export pages under an auth manager that cannot "
             "limit a user to some companies (every user reads every company's runs).", "false",
             "true or false (also 1/0, yes/no)"),
    Variable(CONFIG_READ_ONLY_ENV, "The config directory is managed elsewhere (git, a deploy): "
             "a timing change made in the Airflow UI is shown as the change to commit and never "
             "written, even where the directory could be written.", "false",
             "true or false (also 1/0, yes/no)"),
    # Operational deployment defaults (an export's own settings win)
    Variable(RETRIES_ENV, "How often an export task is retried.", str(TASK_RETRIES),
             "a whole number, 0 or more"),
    Variable(RETRY_DELAY_ENV, "The wait before a task's first retry (doubling).",
             str(int(RETRY_DELAY.total_seconds())), _SECONDS),
    Variable(MAX_RETRY_DELAY_ENV, "The longest wait between two tries of a task.",
             str(int(MAX_RETRY_DELAY.total_seconds())), _SECONDS),
    Variable(DELIVERY_BASE_ENV, "The wait before a delivery's first retry (doubling).",
             f"{RETRY_DELAY_ENV}'s value", _SECONDS),
    Variable(DELIVERY_CAP_ENV, "The longest wait between two delivery tries.",
             str(int(DELIVERY_RETRY_CAP.total_seconds())), _SECONDS),
    Variable(f"{TIMEOUT_ENV_PREFIX}<KIND>", "The execution_timeout of each task kind: "
             "RESOLVE, SENSOR (per poke), RENDER, PUBLISH, DELIVER, SMALL (bookkeeping tasks).",
             ", ".join(f"{kind.upper()} {int(limit.total_seconds())} s"
                       for kind, limit in TASK_TIMEOUTS.items()),
             "a duration: 2h, 90m, 1h30m, 45s or ISO 8601 PT2H; above zero"),
    Variable(POKE_ENV, "How often wait_for_watermark looks at a source's watermark.",
             str(int(WATERMARK_POKE_INTERVAL.total_seconds())), _SECONDS),
    Variable(LOOKBACK_ENV, "How far back a run looks for missed slots at least.",
             str(int(CATCHUP_LOOKBACK.total_seconds() // 3600)),
             "a number of hours, 0 or more (0: only back to the previous run)"),
    Variable(BATCH_THRESHOLD_ENV, "A schedule with more missed periods than this recovers "
             "them in batches (one task exports many periods, each with its own run, artifact "
             "and deliveries) instead of one backfill run per period.", str(BATCH_THRESHOLD),
             "a whole number, 0 or more (0: every recovery is batched)"),
    Variable(BATCH_SIZE_ENV, "How many periods one batch task exports, oldest first.",
             str(BATCH_SIZE), "a whole number, at least 1"),
)


# ``2d``, ``3h``, ``90m``, ``45s`` and combinations in that order (``1h30m``): the short forms
# of every duration, in config files (export_lib.config.durations) and variables alike.
_SHORT_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def short_duration_seconds(text: str) -> int | None:
    """The seconds of a short-form duration (``1h30m`` → 5400), None for any other text."""
    text = text.strip()
    match = _SHORT_DURATION.fullmatch(text) if len(text) <= 40 else None
    if not match or not any(match.groups()):
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


# The Airflow way to set an EXPORT_<NAME> setting: option <name> of the [exports] section (the
# provider metadata declares it, export_airflow/provider.py), as AIRFLOW__EXPORTS__<NAME> in the
# environment (read here, so exportctl sees it too) or in airflow.cfg (read by the Airflow edge,
# which registers the lookup with :func:`use_airflow_config`). EXPORT_<NAME> wins over both.
EXPORTS_PREFIX = "EXPORT_"
AIRFLOW_ENV_PREFIX = "AIRFLOW__EXPORTS__"
_airflow_config: list = []  # at most one lookup: option name -> value or None
_sources: dict[str, str] = {}  # variable -> where its last value was read (_source)


def exports_option(name: str) -> str | None:
    """``EXPORT_RETRIES`` → ``retries``: its option in the ``[exports]`` section (None: the
    variable has no Airflow form)."""
    if not name.startswith(EXPORTS_PREFIX) or "<" in name:
        return None
    return name.removeprefix(EXPORTS_PREFIX).lower()


def use_airflow_config(lookup) -> None:
    """Read ``[exports]`` options through ``lookup(option) -> str | None`` (airflow.cfg) after
    both environment forms; None stops that."""
    _airflow_config[:] = [lookup] if lookup else []


def _read(name: str, environ: Environ | None) -> str | None:
    """The variable's value without surrounding blanks; None when unset or empty. An unset
    ``EXPORT_<NAME>`` falls back to ``AIRFLOW__EXPORTS__<NAME>``, then to airflow.cfg's
    ``[exports] <name>`` when the Airflow edge registered it (this process's settings only)."""
    env = os.environ if environ is None else environ
    value, _sources[name] = env.get(name), name
    option = exports_option(name) if value is None or not value.strip() else None
    if option:
        value, _sources[name] = env.get(AIRFLOW_ENV_PREFIX + option.upper()), (
            AIRFLOW_ENV_PREFIX + option.upper())
        if (value is None or not value.strip()) and _airflow_config and environ is None:
            value, _sources[name] = _airflow_config[0](option), f"airflow.cfg [exports] {option}"
    if value is None:
        return None
    return value.strip() or None


def _source(name: str) -> str:
    """Where ``name``'s value was last read from, for an error about it: the variable itself,
    its ``AIRFLOW__EXPORTS__`` form or airflow.cfg's option."""
    return _sources.get(name, name)


# --- Where things are ----------------------------------------------------------------------

def export_home(environ: Environ | None = None) -> Path:
    """``EXPORT_HOME``, else the working directory: what the embedded defaults (demo source,
    SQLite ledger, ``exports/``) are relative to."""
    return Path(_read("EXPORT_HOME", environ) or os.getcwd()).resolve()


def airflow_home(environ: Environ | None = None) -> Path | None:
    """``AIRFLOW_HOME`` as this process has it (None when unset)."""
    value = _read("AIRFLOW_HOME", environ)
    return Path(value) if value else None


def ledger_url(environ: Environ | None = None) -> str | None:
    """``EXPORT_LEDGER_URL`` (a SQLAlchemy URL), or None for the embedded SQLite ledger."""
    return _read("EXPORT_LEDGER_URL", environ)


def config_dir(environ: Environ | None = None) -> str | None:
    """``EXPORT_CONFIG_DIR``: the config catalog directory, when the caller names none."""
    return _read("EXPORT_CONFIG_DIR", environ)


def config_read_only(environ: Environ | None = None) -> bool:
    """``EXPORT_CONFIG_READ_ONLY`` (true/false, default false): the config directory is managed
    elsewhere (in git, by a deploy) even where this process could write it, so the company
    page shows a timing change as the change to commit and never writes the file."""
    return _flag(CONFIG_READ_ONLY_ENV, environ,
                 "false: the company page writes the config file where it can")


def _flag(name: str, environ: Environ | None, default_meaning: str) -> bool:
    """A true/false variable (also 1/0, yes/no), false when unset; anything else refused."""
    raw = _read(name, environ)
    if raw is None or raw.lower() in ("false", "0", "no"):
        return False
    if raw.lower() in ("true", "1", "yes"):
        return True
    raise ConfigError(f"{_source(name)}: {raw!r} is not true or false; unset it for the default "
                      f"({default_meaning})")


def artifact_root(environ: Environ | None = None) -> str | None:
    """``EXPORT_ARTIFACT_ROOT``: a path, ``file://``, ``s3://bucket/prefix`` or ``gs://…``."""
    return _read("EXPORT_ARTIFACT_ROOT", environ)


def artifact_conn(default: str, environ: Environ | None = None) -> str:
    """``EXPORT_ARTIFACT_CONN``: the connection id of an object-store artifact root."""
    return _read("EXPORT_ARTIFACT_CONN", environ) or default


def connection_var(conn_id: str) -> str:
    """``AIRFLOW_CONN_<ID>``: the variable Airflow and export_lib read a connection from."""
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def connection_uri(conn_id: str, environ: Environ | None = None) -> str | None:
    """The URI (or JSON) of connection ``conn_id`` in ``AIRFLOW_CONN_<ID>``, if set."""
    return _read(connection_var(conn_id), environ)


def dag_index_base(environ: Environ | None = None) -> Path | None:
    """``EXPORT_DAG_INDEX_DIR``, else ``$AIRFLOW_HOME/export_dag_index``, else None."""
    explicit = _read(DAG_INDEX_ENV, environ)
    if explicit:
        return Path(explicit)
    home = airflow_home(environ)
    return home / "export_dag_index" if home else None


def executor(environ: Environ | None = None) -> str:
    """``AIRFLOW__CORE__EXECUTOR`` as this process has it ('' when unset)."""
    return _read("AIRFLOW__CORE__EXECUTOR", environ) or ""


def celery_broker_url(environ: Environ | None = None) -> str:
    """``AIRFLOW__CELERY__BROKER_URL`` as the workers have it ('' when unset)."""
    return _read("AIRFLOW__CELERY__BROKER_URL", environ) or ""


def log_format(environ: Environ | None = None) -> str:
    """``EXPORT_LOG_FORMAT``: ``json`` or ``text`` (the default; any other value is logged as a
    warning and kept as text, so a typo never stops a process from logging)."""
    wanted = (_read(LOG_FORMAT_ENV, environ) or "text").lower()
    if wanted not in ("json", "text"):
        log.warning("%s=%r is not a log format; use json or text (the default); keeping text",
                    LOG_FORMAT_ENV, wanted)
        return "text"
    return wanted


def statement_timeout(environ: Environ | None = None) -> str | None:
    """``EXPORT_SOURCE_STATEMENT_TIMEOUT`` as written (PostgreSQL units; checked by
    export_lib.source.session, which also reads the connection extra), or None."""
    return _read(STATEMENT_TIMEOUT_ENV, environ)


def ledger_connect_timeout(environ: Environ | None = None) -> int:
    """``EXPORT_LEDGER_CONNECT_TIMEOUT_SECONDS`` (whole seconds, at least 2: libpq counts
    less as 2), else 5: libpq waits for an unreachable host until the OS gives up otherwise."""
    return _whole(LEDGER_CONNECT_TIMEOUT_ENV, environ, LEDGER_CONNECT_TIMEOUT, 2,
                  "a whole number of seconds >= 2")


def ledger_reconnect(environ: Environ | None = None) -> int:
    """``EXPORT_LEDGER_RECONNECT_SECONDS`` (whole seconds, 0: no waiting), else 60: long
    enough for a PostgreSQL restart or failover, short of any task timeout."""
    return _whole(LEDGER_RECONNECT_ENV, environ, LEDGER_RECONNECT, 0,
                  "a whole number of seconds >= 0")


def delivery_heartbeat(environ: Environ | None = None) -> timedelta:
    """``EXPORT_DELIVERY_HEARTBEAT_SECONDS`` (whole seconds, at least 1), else 15."""
    return timedelta(seconds=_whole(DELIVERY_HEARTBEAT_ENV, environ, DELIVERY_HEARTBEAT, 1,
                                    "a whole number of seconds >= 1"))


def object_store_max_attempts(environ: Environ | None = None) -> int:
    """``EXPORT_OBJECT_STORE_MAX_ATTEMPTS`` (at least 1: no retry), else 5."""
    return _whole(OBJECT_STORE_MAX_ATTEMPTS_ENV, environ, OBJECT_STORE_MAX_ATTEMPTS, 1,
                  "a whole number >= 1")


# --- Render lease and budget ---------------------------------------------------------------

def _whole(name: str, environ: Environ | None, default: int, least: int, what: str) -> int:
    raw = _read(name, environ)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < least:
        raise ConfigError(f"{_source(name)}: {raw!r} is not {what}; unset it for the default "
                          f"({default})")
    return int(raw)


def render_lease(environ: Environ | None = None) -> timedelta:
    """``EXPORT_RENDER_LEASE_SECONDS`` (whole seconds, at least 3), else 5 minutes."""
    seconds = _whole(RENDER_LEASE_ENV, environ, int(RENDER_LEASE.total_seconds()), 3,
                     "a whole number of seconds >= 3")
    return timedelta(seconds=seconds)


def render_budget(environ: Environ | None = None) -> tuple[int, int]:
    """``(EXPORT_RENDER_BUDGET, EXPORT_RENDER_BUDGET_PER_COMPANY)``, else ``(4, 2)``."""
    what = "a positive whole number of renders"
    return (_whole(RENDER_BUDGET_ENV, environ, RENDER_BUDGET, 1, what),
            _whole(RENDER_BUDGET_PER_COMPANY_ENV, environ, RENDER_BUDGET_PER_COMPANY, 1, what))


def ui_secret(environ: Environ | None = None) -> str | None:
    """``EXPORT_UI_SECRET``: the key of the export pages' action tokens when set (else the
    Airflow edge uses ``[api] secret_key``); its value is never shown."""
    return _read(UI_SECRET_ENV, environ)


def ui_allow_unscoped_auth(environ: Environ | None = None) -> bool:
    """``EXPORT_UI_ALLOW_UNSCOPED_AUTH`` (true/false, default false): serve the export pages
    under an auth manager that cannot limit a user to some DAGs (SimpleAuthManager), where every
    user reads every company's runs — a single-tenant setup's explicit choice (ADR 0023)."""
    return _flag(UI_ALLOW_UNSCOPED_ENV, environ,
                 "false: the export pages need an auth manager that scopes DAGs")


def ui_token_ttl(environ: Environ | None = None) -> timedelta:
    """``EXPORT_UI_TOKEN_MINUTES`` (1 to 1440), else 60: how long an action form stays valid."""
    minutes = _whole(UI_TOKEN_MINUTES_ENV, environ, int(UI_TOKEN_TTL.total_seconds() // 60), 1,
                     "a whole number of minutes from 1 to 1440")
    if minutes > 1440:
        raise ConfigError(f"{_source(UI_TOKEN_MINUTES_ENV)}: {minutes} is more than a day "
                          "(1440); an action form is for now, unset it for the default (60)")
    return timedelta(minutes=minutes)


# --- Operational deployment defaults (ADR 0015) --------------------------------------------

def _number(name: str, environ: Environ | None, unit: str, *, zero: bool = False
            ) -> float | None:
    raw = _read(name, environ)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "above 0"
        raise ConfigError(f"{_source(name)}: {raw!r} is not a number of {unit} {least}; write e.g. "
                          f"{name}=30, or unset it for the default")
    return value


def task_retries(environ: Environ | None = None) -> int:
    """``EXPORT_RETRIES``: how often an export task is retried, else 11."""
    return _whole(RETRIES_ENV, environ, TASK_RETRIES, 0, "a whole number of retries")


def retry_delay(environ: Environ | None = None) -> timedelta:
    """``EXPORT_RETRY_DELAY_SECONDS``: an export task's first retry delay, else 10 minutes."""
    seconds = _number(RETRY_DELAY_ENV, environ, "seconds")
    return RETRY_DELAY if seconds is None else timedelta(seconds=seconds)


def max_retry_delay(environ: Environ | None = None) -> timedelta:
    """``EXPORT_MAX_RETRY_DELAY_SECONDS``: the longest wait between two tries, else 1 day."""
    seconds = _number(MAX_RETRY_DELAY_ENV, environ, "seconds")
    return MAX_RETRY_DELAY if seconds is None else timedelta(seconds=seconds)


def delivery_retry_base(environ: Environ | None = None) -> timedelta:
    """``EXPORT_DELIVERY_RETRY_BASE_SECONDS``, else :func:`retry_delay` (10 minutes)."""
    seconds = _number(DELIVERY_BASE_ENV, environ, "seconds")
    return retry_delay(environ) if seconds is None else timedelta(seconds=seconds)


def delivery_retry_cap(environ: Environ | None = None) -> timedelta:
    """``EXPORT_DELIVERY_RETRY_CAP_SECONDS``: the longest wait between two delivery tries,
    else 6 h (never below the base: see export_airflow.building.retry_policy.delivery_policy)."""
    seconds = _number(DELIVERY_CAP_ENV, environ, "seconds")
    return DELIVERY_RETRY_CAP if seconds is None else timedelta(seconds=seconds)


def task_timeout(kind: str, environ: Environ | None = None) -> timedelta:
    """``EXPORT_TIMEOUT_<KIND>`` (``2h``, ``90m``, ``1h30m``, ``45s`` or ISO 8601 ``PT2H``),
    else the :data:`TASK_TIMEOUTS` default of ``kind``."""
    var = f"{TIMEOUT_ENV_PREFIX}{kind.upper()}"
    default = TASK_TIMEOUTS[kind]
    text = _read(var, environ)
    if text is None:
        return default
    value = _duration(text)
    if value is None:
        raise ConfigError(f"{_source(var)}: {text!r} is not a duration; use e.g. '2h', '90m', "
                          "'1h30m' or "
                          f"'45s', or unset it for the default ({int(default.total_seconds())} "
                          "s)")
    if value <= timedelta(0):
        raise ConfigError(f"{_source(var)}: {text!r} is zero; every export task needs a time "
                          "limit")
    return value


def _duration(text: str) -> timedelta | None:
    seconds = short_duration_seconds(text)
    try:
        if seconds is not None:
            return timedelta(seconds=seconds)
        if text.upper().startswith("P"):
            from pydantic import TypeAdapter, ValidationError

            try:
                return TypeAdapter(timedelta).validate_python(text)
            except ValidationError:
                return None
    except OverflowError:
        return None
    return None


def watermark_poke_interval(environ: Environ | None = None) -> timedelta:
    """``EXPORT_WATERMARK_POKE_SECONDS``: how often ``wait_for_watermark`` looks, else 5 min."""
    seconds = _number(POKE_ENV, environ, "seconds")
    return WATERMARK_POKE_INTERVAL if seconds is None else timedelta(seconds=seconds)


def batch_recovery_threshold(environ: Environ | None = None) -> int:
    """``EXPORT_BATCH_RECOVERY_THRESHOLD``: more missed periods than this are recovered in
    batches (ADR 0032), else 8."""
    return _whole(BATCH_THRESHOLD_ENV, environ, BATCH_THRESHOLD, 0, "a whole number, 0 or more")


def batch_recovery_size(environ: Environ | None = None) -> int:
    """``EXPORT_BATCH_RECOVERY_SIZE``: the periods one batch task exports, else 50."""
    return _whole(BATCH_SIZE_ENV, environ, BATCH_SIZE, 1, "a whole number, at least 1")


def catchup_lookback(environ: Environ | None = None) -> timedelta:
    """``EXPORT_CATCHUP_LOOKBACK_HOURS`` (0 allowed: only back to the previous run), else
    48 h: how far back ``recover_missed`` looks for missed slots at least."""
    hours = _number(LOOKBACK_ENV, environ, "hours", zero=True)
    return CATCHUP_LOOKBACK if hours is None else timedelta(hours=hours)
