"""The render fixtures (tests/fixtures/render.py) for this folder's tests."""

from tests.fixtures.render import *  # noqa: F403 - fixtures used by name
