"""The delivery fixtures (tests/fixtures/delivery.py) for this folder's tests."""

from tests.fixtures.delivery import *  # noqa: F403 - fixtures used by name
