"""The ledger fixtures (tests/fixtures/ledger.py) for this folder's tests."""

from tests.fixtures.ledger import *  # noqa: F403 - fixtures used by name
