"""Hostile trigger-form parameters of a manual export: (id, params, expected error pattern).

``VALID`` is a request that registers (the control); every case changes it. Each must fail
with one ``ConfigError`` naming the request field, before anything is registered. Windows are
relative to ``NOW`` (tests/world.py seeds data up to it).
"""

from __future__ import annotations

from datetime import UTC, datetime

NOW = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)

VALID = {"company": "acme", "base_export": "acme/daily-spend", "reason": "audit request 42",
         "window_start": "2026-03-27T00:00:00+01:00", "window_end": "2026-03-28T00:00:00+01:00"}

CASES = [
    ("company-path-traversal", {"company": "../../etc/passwd"},
     r"manual export form: company: '\.\./\.\./etc/passwd' is not a valid company id: use "
     r"lower-case letters, digits, and single '-' or '_' between them \(e\.g\. acme\)$"),
    ("company-newline", {"company": "acme\n"},
     r"manual export form: company: 'acme\\n' is not a valid company id: use lower-case"),
    ("company-unknown", {"company": "globex", "base_export": "globex/daily"},
     r"manual export form: company: unknown company 'globex'|no config file for company 'globex'"),
    ("base-export-other-company", {"base_export": "kiwi-outdoors/six-hourly-orders"},
     r"unknown schedule 'kiwi-outdoors/six-hourly-orders'"),
    ("base-export-path", {"base_export": "acme/../kiwi-outdoors/x"},
     r"manual export form: base_export: 'acme/\.\./kiwi-outdoors/x' is not a valid export id: "
     r"use <company>/<export> or <company>/<channel>/primary \(or /secondary\)"),
    ("destination-pattern", {"destinations": ["../x"]},
     r"manual export form: destinations\[0\]: '\.\./x' is not a valid destination id: use "
     r"lower-case letters, digits, '-' or '_', starting with a letter or digit "
     r"\(e\.g\. acme-dir\)$"),
    ("destination-not-configured", {"destinations": ["evil-sftp"]},
     r"destination\(s\) \['evil-sftp'\] are not configured"),
    ("columns-not-configured", {"columns": ["company_id", "secret_column"]},
     r"manual export form: columns: \['secret_column'\] are not columns of the base export"),
    ("columns-tenant-bypass", {"columns": ["value", "other_company_id"]},
     r"manual export form: columns: \['other_company_id'\] are not columns"),
    ("columns-injection", {"columns": ['value"; drop table x; --']},
     r"manual export form: columns\[0\]: 'value\"; drop table x; --' is not a valid column "
     r"name: use letters, digits and '_', not starting with a digit"),
    ("window-1970", {"window_start": "1970-01-01T00:00:00Z",
                     "window_end": "1970-01-02T00:00:00Z"},
     r"manual export form: window_start: 1970-01-01T00:00:00\+00:00 is older than the source keeps "
     r"data \(400 days"),
    ("window-2030", {"window_start": "2030-01-01T00:00:00Z", "window_end": "2030-01-02T00:00:00Z"},
     r"manual export form: window_end: 2030-01-02T00:00:00\+00:00 is in the future"),
    ("window-ends-in-the-future", {"window_end": "2026-03-31T00:00:00Z"},
     r"manual export form: window_end: .* is in the future"),
    ("window-reversed", {"window_start": "2026-03-28T00:00:00Z",
                         "window_end": "2026-03-27T00:00:00Z"},
     r"manual export form: window_end: 2026-03-27T00:00:00\+00:00 is not after window_start"),
    ("window-too-long", {"window_start": "2025-01-01T00:00:00Z"},
     r"manual export form: window_start: the window spans more than 400 days"),
    ("reason-300k", {"reason": "x" * 300_000},
     r"manual export form: reason: String should have at most 500 characters \(got 'xxx.*"
     r"…\(300000 chars\)\)$"),
    ("reason-too-short", {"reason": "x"}, r"manual export form: reason: String should have at least 3"),
    ("reason-crlf", {"reason": "audit\r\nX-Forged: 1"},
     r"manual export form: reason: contains a control character \(U\+000D at position "
     r"6\); write the reason as one line of printable characters \(got 'audit\\r\\nX-Forged"),
    ("reason-bidi", {"reason": "audit \u202eevil"},
     r"manual export form: reason: contains a control character \(U\+202E at position 7\)"),
    ("regenerate-text", {"regenerate": "yes"},
     r"manual export form: regenerate: Input should be a valid boolean"),
    ("format-unknown", {"format": "xlsx"}, r"manual export form: format: unknown output format "
     r"'xlsx'; the installed formats are csv, jsonl, parquet\. "),
    ("unknown-field", {"tenant_column": "widget_id"},
     r"manual export form: tenant_column: unknown field; allowed fields:"),
    ("columns-too-many", {"columns": [f"c{i}" for i in range(600)]},
     r"manual export form: columns: Tuple should have at most 500 items"),
]
