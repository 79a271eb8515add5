"""The text patterns config fields must match, each with its rule in words and an example.

A field declares ``Field(pattern=SLUG)``; when a value does not match, pydantic reports the
regular expression, which a config author should never have to read.
:func:`export_lib.config.messages.issues_from_validation` looks the pattern up here and says
instead what is allowed and gives an example:
``company.id: 'Acme' is not a valid company id: use lower-case letters, digits, and single '-'
or '_' between them (e.g. acme-corp)``. Every ``pattern=`` of the config models is one of these
constants (``tests/unit/time/test_config_messages.py`` checks that none is missing).

This module imports nothing of the project, so every model module can use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PatternRule:
    """What a pattern allows, in words (``use …``), and a value it accepts."""

    allowed: str
    example: str


RULES: dict[str, PatternRule] = {}


def pattern(regex: str, *, allowed: str, example: str) -> str:
    """Register ``regex`` with its rule in words; returns ``regex`` for ``Field(pattern=…)``."""
    RULES[regex] = PatternRule(allowed, example)
    return regex


SLUG = pattern(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$",
               allowed="lower-case letters, digits, and single '-' or '_' between them",
               example="acme-corp")
SOURCE_NAME = pattern(r"^[a-z][a-z0-9_]{0,62}$",
                      allowed="a lower-case letter, then lower-case letters, digits or '_' "
                      "(at most 63 characters)", example="demo_source")
CONN_ID = pattern(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
                  allowed="letters, digits, '_', '.' or '-', starting with a letter, digit or '_'",
                  example="acme_sftp")
NOTIFIER_CONN_ID = pattern(r"^[A-Za-z0-9_.-]+$", allowed="letters, digits, '_', '.' or '-'",
                           example="smtp_default")
DESTINATION_ID = pattern(r"^[a-z0-9][a-z0-9_-]*$",
                         allowed="lower-case letters, digits, '-' or '_', starting with a letter "
                         "or digit", example="acme-dir")
S3_BUCKET = pattern(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
                    allowed="3 to 63 lower-case letters, digits, '.' or '-', starting and ending "
                    "with a letter or digit, as S3 requires", example="acme-exports")
GCS_BUCKET = pattern(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$",
                     allowed="3 to 222 lower-case letters, digits, '.', '-' or '_', starting and "
                     "ending with a letter or digit", example="acme-exports")
COLUMN_NAME = pattern(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
                      allowed="letters, digits and '_', not starting with a digit (at most 63 "
                      "characters)", example="event_time")
SCHEDULE_ID = pattern(
    r"^[a-z0-9]+(?:[-_][a-z0-9]+)*/[a-z0-9]+(?:[-_][a-z0-9]+)*(?:/(?:primary|secondary))?$",
    allowed="<company>/<export> or <company>/<channel>/primary (or /secondary), each name of "
    "lower-case letters, digits, and single '-' or '_' between them",
    example="acme/daily-spend")
NOTIFIER_PATH = pattern(r"^(smtp|[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+)$",
                        allowed="'smtp' or the dotted path of an Airflow notifier class",
                        example="airflow.providers.slack.notifications.slack.SlackNotifier")
KEYWORD = pattern(r"^[a-z_][a-z0-9_]*$",
                  allowed="lower-case letters, digits and '_', not starting with a digit; it names "
                  "a keyword argument of the notifier", example="text")
