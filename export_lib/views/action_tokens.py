"""The anti-forgery token of the export pages' action forms (release, requeue, revoke, …).

``<expires>.<hmac>``: ``expires`` is the Unix second the form stops being valid, ``hmac`` the
hex HMAC-SHA256 under the deployment's secret of the user, the run and ``expires``. So a token
works only for the user and the run it was made for, only until it expires (an hour by default,
``EXPORT_UI_TOKEN_MINUTES``), and only where the secret is known: every api-server of a
deployment shares it, an attacker does not. A deployment without a secret of at least
:data:`MIN_SECRET_CHARS` characters gets no token at all: the page shows no action and every
action is refused (no fallback key anybody could read in this repository).

Plain Python: the Airflow edge (``export_airflow.pages.ui_access``) passes the secret and the time.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timedelta

from export_lib.errors import ActionTokenError

MIN_SECRET_CHARS = 16
NO_SECRET = ("the export pages' actions need a secret of at least 16 characters: set Airflow's "
             "[api] secret_key (AIRFLOW__API__SECRET_KEY) or EXPORT_UI_SECRET, the same on every "
             "api-server; nothing was changed")


def _mac(secret: str, user: str, run_key: str, expires: int) -> str:
    message = "\x1f".join((user, run_key, str(expires))).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def usable(secret: str | None) -> bool:
    return bool(secret) and len(secret or "") >= MIN_SECRET_CHARS


def make_token(secret: str | None, user: str, run_key: str, *, now: datetime,
               ttl: timedelta) -> str:
    """A token for ``user``'s actions on ``run_key``, valid until ``now + ttl``."""
    if not usable(secret):
        raise ActionTokenError(NO_SECRET)
    expires = int((now + ttl).timestamp())
    return f"{expires}.{_mac(secret or '', user, run_key, expires)}"


def check_token(secret: str | None, user: str, run_key: str, token: str | None, *,
                now: datetime, ttl: timedelta) -> None:
    """Raise :class:`ActionTokenError` unless ``token`` is one :func:`make_token` made for
    ``user`` and ``run_key`` that has not expired (nor claims to live longer than ``ttl``)."""
    if not usable(secret):
        raise ActionTokenError(NO_SECRET)
    expires_text, _, mac = (token or "").partition(".")
    if not expires_text.isdigit() or len(expires_text) > 12 or not mac:
        raise ActionTokenError("missing or malformed form token: reload the page and try "
                               "again; nothing was changed")
    expires = int(expires_text)
    if not hmac.compare_digest(mac, _mac(secret or "", user, run_key, expires)):
        raise ActionTokenError("wrong form token (made for another user or run, or under "
                               "another secret): reload the page and try again; nothing was "
                               "changed")
    if expires <= now.timestamp():
        raise ActionTokenError("the form token expired (forms are valid for "
                               f"{int(ttl.total_seconds() // 60)} min): reload the page and try "
                               "again; nothing was changed")
    if expires > (now + ttl).timestamp() + 60:
        raise ActionTokenError("the form token claims to be valid for longer than forms are: "
                               "reload the page; nothing was changed")


# -- the company page's forms: one token per form, spent once ---------------------------------

def make_form_token(secret: str | None, user: str, scope: str, *, now: datetime,
                    ttl: timedelta, nonce: str) -> str:
    """A token for one change form of ``scope`` (``company/<id>``): ``<nonce>.<expires>.<mac>``,
    bound to the user, the scope and a fresh random ``nonce``, so that each rendered form has
    its own token and the ledger can spend it once (``ledger.controls.spend_form_token``)."""
    if not nonce.isalnum() or len(nonce) > 32:
        raise ActionTokenError("a form nonce is up to 32 letters and digits")
    return f"{nonce}.{make_token(secret, user, f'{scope}/{nonce}', now=now, ttl=ttl)}"


def check_form_token(secret: str | None, user: str, scope: str, token: str | None, *,
                     now: datetime, ttl: timedelta) -> tuple[str, datetime]:
    """The token's MAC (what the ledger spends) and its expiry; ActionTokenError naming why
    unless ``token`` is one :func:`make_form_token` made for ``user`` and ``scope`` that has
    not expired."""
    nonce, _, rest = (token or "").partition(".")
    if not nonce.isalnum() or len(nonce) > 32:
        raise ActionTokenError("missing or malformed form token: reload the page and try "
                               "again; nothing was changed")
    check_token(secret, user, f"{scope}/{nonce}", rest, now=now, ttl=ttl)
    expires, _, mac = rest.partition(".")
    return mac, datetime.fromtimestamp(int(expires), tz=now.tzinfo)
