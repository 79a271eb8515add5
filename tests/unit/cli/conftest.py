"""The cli fixtures (tests/fixtures/cli.py) for this folder's tests."""

from tests.fixtures.cli import *  # noqa: F403 - fixtures used by name
