"""Free text in config files is one line of printable characters.

Every string a company or defaults file holds — names, paths, prefixes, endpoints, addresses,
filter values, notifier kwargs, and every key — ends up in a file name, an HTTP request line,
a mail header, a log line or a web page. A CR/LF there splits a header or forges a log line; a
NUL truncates a path; a bidirectional override (``U+202E``) makes a page show another text than
the one stored. So the raw YAML data is walked once, before validation, and each string with a
control character is one error naming file, field and the character's code point.

Refused: C0 controls (U+0000–U+001F, tab included), DEL and C1 controls (U+007F–U+009F), the
Unicode line and paragraph separators, zero-width and bidirectional formatting characters and
the byte-order mark. The one exception is ``csv.delimiter``, whose allowed values (a tab among
them) are a fixed set checked by its model. A ``!!binary`` value is refused as well: pydantic
would decode its bytes into a string and nothing would have looked at them.
"""

from __future__ import annotations

import re
from typing import Any

from export_lib.config.limits import cut_line, shown

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
# Fields whose value is checked against a fixed set instead (the tab delimiter).
_EXEMPT = ("csv.delimiter",)
MAX_LINES = 10


def control_char(text: str) -> str | None:
    """``U+XXXX at position N`` of the first control character in ``text``, or None."""
    found = CONTROL.search(text)
    if found is None:
        return None
    return f"U+{ord(found.group()):04X} at position {found.start() + 1}"


def text_issues(file: str, data: Any) -> list[str]:
    """One ``file: field: …`` line per string (value or key) carrying a control character."""
    issues: list[str] = []
    stack: list[tuple[str, Any]] = [("", data)]
    while stack and len(issues) < MAX_LINES:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                field = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and control_char(key):
                    issues.append(_line(file, where or "(file)", key, "key "))
                    continue
                stack.append((field, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(value))))
        elif isinstance(value, str) and control_char(value) and not where.endswith(_EXEMPT):
            issues.append(_line(file, where, value))
        elif isinstance(value, (bytes, bytearray)):  # !!binary: validation would decode it
            issues.append(f"{file}: {where or '(file)'}: a binary value (!!binary, "
                          f"{len(value)} bytes); config values are text, write it as such")
    return issues


def _line(file: str, field: str, value: str, what: str = "") -> str:
    return cut_line(f"{file}: {field}: the {what}text {shown(value)} contains a control "
                    f"character ({control_char(value)}); remove it: free text is one line of "
                    "printable characters")
