"""The one way a location is shown: scheme, host and port, nothing else.

Every message, ledger column (``last_error``, ``target``), XCom value and log line that names a
connection, a ledger URL or a webhook goes through :func:`mask_uri`. User names, passwords,
paths (webhook URLs often carry their secret in the path), query strings (``?token=``) and
fragments are dropped, not starred: what is not printed cannot leak. Local SQLite/file URLs keep
their path (a file path carries no credential and is what a reader needs to find the file).

:func:`scrub` is the second line of defence for text this package does not compose itself (an
exception message from a client library): every known secret value is replaced by ``***``.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

MASK = "***"
_PATH_SCHEMES = {"sqlite", "file"}


def mask_uri(uri: str) -> str:
    """``scheme://host:port`` of ``uri`` (``sqlite:///path`` keeps its path).

    >>> mask_uri("https://svc:pw@hooks.example.com:8443/T0/B1/xyz?token=abc")
    'https://hooks.example.com:8443'
    """
    text = str(uri).strip()
    if "://" not in text:  # ``user:pw@host`` parses as scheme ``user``: show nothing of it
        return MASK
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # not a parseable URL: show only what precedes "://"
        scheme = text.split("://", 1)[0] if "://" in text else ""
        return f"{scheme}://{MASK}" if scheme.isidentifier() else MASK
    scheme = parts.scheme.split("+", 1)[0] if parts.scheme else ""
    if not scheme:
        return MASK
    if scheme in _PATH_SCHEMES and not parts.netloc:
        return f"{scheme}://{parts.path}"
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}{f':{port}' if port else ''}"


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret value (longest first; 4 characters or more) replaced by ``***``."""
    out = str(text)
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        out = out.replace(secret, MASK)
    return out
