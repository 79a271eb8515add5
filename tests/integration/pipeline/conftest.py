"""The pipeline fixtures (tests/fixtures/pipeline.py) for this folder's tests."""

from tests.fixtures.pipeline import *  # noqa: F403 - fixtures used by name
