"""The run a restatement restates, read from the ledger (ADR 0023).

A restatement run carries only a run key in its ``conf``: the REST API lets whoever may
trigger it send any ``conf``, so nothing else in it is believed. The run — window, config
version, captured destinations — and the late-data grace come from the ledger's record and
its captured config snapshot; a key of another company than the restatement DAG's is refused,
so a company's operator restates that company's runs only.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import TypeAdapter, ValidationError

from export_lib.errors import AuthorizationError, ConfigError
from export_lib.ledger import Ledger
from export_lib.pipeline.start import _summary
from export_lib.pipeline.summary import RunSummary

_GRACE = TypeAdapter(timedelta)


def restated_run(ledger: Ledger, run_key: str, company: str) -> tuple[RunSummary, timedelta]:
    """``run_key``'s summary and late-data grace, for a restatement of ``company``.

    :raises ConfigError: no run key, or no such run in the ledger
    :raises AuthorizationError: the run is another company's
    """
    key = (run_key or "").strip()
    if not key:
        raise ConfigError(f"restatement of {company}: no run_key in the run's conf; trigger it "
                          "with {\"run_key\": \"<company>/<export>/<slot>\"}")
    run = ledger.get_run(key)
    if run is None:
        raise ConfigError(f"restatement of {company}: no run {key!r} in the ledger "
                          f"(exportctl runs --company {company} lists its runs)")
    if run.company != company:
        raise AuthorizationError(f"restatement of {company}: run {key!r} is not {company}'s; "
                                 "each company's restatement DAG restates its own runs only")
    late_data = ((run.config_snapshot or {}).get("policies") or {}).get("late_data") or {}
    try:
        grace = _GRACE.validate_python(late_data.get("grace", 0))
    except ValidationError:
        raise ConfigError(f"restatement of {key}: the captured late_data.grace "
                          f"{late_data.get('grace')!r} is not a duration") from None
    return _summary(ledger, run, created=False), grace
