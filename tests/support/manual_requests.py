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
     r"manual_export: company: String should match pattern"),
    ("company-newline", {"company": "acme\n"}, r"manual_export: company: String should match"),
    ("company-unknown", {"company": "globex", "base_export": "globex/daily"},
     r"manual_export: company: unknown company 'globex'|no config file for company 'globex'"),
    ("base-export-other-company", {"base_export": "kiwi-outdoors/six-hourly-orders"},
     r"unknown schedule 'kiwi-outdoors/six-hourly-orders'"),
    ("base-export-path", {"base_export": "acme/../kiwi-outdoors/x"},
     r"manual_export: base_export: String should match pattern"),
    ("destination-pattern", {"destinations": ["../x"]},
     r"manual_export: destinations\.0: String should match pattern"),
    ("destination-not-configured", {"destinations": ["evil-sftp"]},
     r"destination\(s\) \['evil-sftp'\] are not configured"),
    ("columns-not-configured", {"columns": ["company_id", "secret_column"]},
     r"manual_export: columns: \['secret_column'\] are not columns of the base export"),
    ("columns-tenant-bypass", {"columns": ["value", "other_company_id"]},
     r"manual_export: columns: \['other_company_id'\] are not columns"),
    ("columns-injection", {"columns": ['value"; drop table x; --']},
     r"manual_export: columns\.0: String should match pattern"),
    ("window-1970", {"window_start": "1970-01-01T00:00:00Z",
                     "window_end": "1970-01-02T00:00:00Z"},
     r"manual_export: window_start: 1970-01-01T00:00:00\+00:00 is older than the source keeps "
     r"data \(400 days"),
    ("window-2030", {"window_start": "2030-01-01T00:00:00Z", "window_end": "2030-01-02T00:00:00Z"},
     r"manual_export: window_end: 2030-01-02T00:00:00\+00:00 is in the future"),
    ("window-ends-in-the-future", {"window_end": "2026-03-31T00:00:00Z"},
     r"manual_export: window_end: .* is in the future"),
    ("window-reversed", {"window_start": "2026-03-28T00:00:00Z",
                         "window_end": "2026-03-27T00:00:00Z"},
     r"window_end 2026-03-27T00:00:00\+00:00 is not after window_start"),
    ("window-too-long", {"window_start": "2025-01-01T00:00:00Z"},
     r"the window spans more than 400 days"),
    ("reason-300k", {"reason": "x" * 300_000},
     r"manual_export: reason: String should have at most 500 characters \(got 'xxx.*"
     r"…\(300000 chars\)\)$"),
    ("reason-too-short", {"reason": "x"}, r"manual_export: reason: String should have at least 3"),
    ("reason-crlf", {"reason": "audit\r\nX-Forged: 1"},
     r"manual_export: reason: Value error, contains a control character \(U\+000D at position "
     r"6\); write the reason as one line of printable characters \(got 'audit\\r\\nX-Forged"),
    ("reason-bidi", {"reason": "audit \u202eevil"},
     r"manual_export: reason: Value error, contains a control character \(U\+202E at position 7\)"),
    ("regenerate-text", {"regenerate": "yes"},
     r"manual_export: regenerate: Input should be a valid boolean"),
    ("format-unknown", {"format": "xlsx"}, r"manual_export: format: Input should be 'csv' or"),
    ("unknown-field", {"tenant_column": "widget_id"},
     r"manual_export: tenant_column: unknown field; allowed fields:"),
    ("columns-too-many", {"columns": [f"c{i}" for i in range(600)]},
     r"manual_export: columns: Tuple should have at most 500 items"),
]
