"""The obligations page's action token (issue 23): made only under a configured secret, bound
to the user and the run, and it expires."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from export_lib import settings
from export_lib.errors import ActionTokenError, ConfigError
from export_lib.views.action_tokens import check_token, make_token

SECRET = "s3cret-of-the-deployment-0123"
NOW = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
RUN = "acme/daily-spend/2026-12-01T06:00Z"


def token(**kw: object) -> str:
    args: dict = {"secret": SECRET, "user": "ada", "run_key": RUN, "now": NOW, "ttl": HOUR}
    args.update(kw)
    return make_token(args.pop("secret"), args.pop("user"), args.pop("run_key"), **args)


def check(value: str | None, **kw: object) -> None:
    args: dict = {"secret": SECRET, "user": "ada", "run_key": RUN, "now": NOW, "ttl": HOUR}
    args.update(kw)
    check_token(args.pop("secret"), args.pop("user"), args.pop("run_key"), value, **args)


def test_a_token_works_for_its_user_and_run_until_it_expires() -> None:
    made = token()
    assert made.split(".")[0] == str(int((NOW + HOUR).timestamp()))
    check(made)
    check(made, now=NOW + HOUR - timedelta(seconds=1))
    with pytest.raises(ActionTokenError, match=r"^the form token expired \(forms are valid for "
                       r"60 min\): reload the page and try again; nothing was changed$"):
        check(made, now=NOW + HOUR)


@pytest.mark.parametrize(("change", "value"), [
    ("user", "vic"), ("run_key", "acme/daily-spend/2026-12-02T06:00Z"),
    ("secret", "another-deployment-secret")])
def test_a_token_is_refused_for_another_user_run_or_secret(change: str, value: str) -> None:
    with pytest.raises(ActionTokenError, match=r"^wrong form token \(made for another user or "
                       r"run, or under another secret\)"):
        check(token(), **{change: value})


def test_a_stretched_expiry_breaks_the_signature() -> None:
    expires, _, mac = token().partition(".")
    with pytest.raises(ActionTokenError, match="^wrong form token"):
        check(f"{int(expires) + 86400}.{mac}")


def test_a_token_made_for_longer_than_forms_live_is_refused() -> None:
    with pytest.raises(ActionTokenError, match="claims to be valid for longer than forms are"):
        check(token(ttl=timedelta(days=2)))


@pytest.mark.parametrize("value", [None, "", "forged", "123", ".abc", "x.abc",
                                   "9999999999999.abc", "-5.abc"])
def test_malformed_tokens_are_refused(value: str | None) -> None:
    with pytest.raises(ActionTokenError, match="^missing or malformed form token"):
        check(value)


@pytest.mark.parametrize("secret", [None, "", "export-ui", "short-secret-15"])
def test_without_a_configured_secret_there_is_no_token_at_all(secret: str | None) -> None:
    message = (r"^the export pages' actions need a secret of at least 16 characters: set "
               r"Airflow's \[api\] secret_key \(AIRFLOW__API__SECRET_KEY\) or EXPORT_UI_SECRET")
    with pytest.raises(ActionTokenError, match=message):
        token(secret=secret)
    with pytest.raises(ActionTokenError, match=message):
        check(token(), secret=secret)


def test_the_lifetime_setting() -> None:
    assert settings.ui_token_ttl({}) == HOUR
    assert settings.ui_token_ttl({"EXPORT_UI_TOKEN_MINUTES": "15"}) == timedelta(minutes=15)
    with pytest.raises(ConfigError, match=r"^EXPORT_UI_TOKEN_MINUTES: '0' is not a whole number "
                       "of minutes from 1 to 1440"):
        settings.ui_token_ttl({"EXPORT_UI_TOKEN_MINUTES": "0"})
    with pytest.raises(ConfigError, match=r"^EXPORT_UI_TOKEN_MINUTES: 1441 is more than a day"):
        settings.ui_token_ttl({"EXPORT_UI_TOKEN_MINUTES": "1441"})
    assert settings.ui_secret({"EXPORT_UI_SECRET": SECRET}) == SECRET
