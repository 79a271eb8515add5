"""Real servers the test session starts and stops (no mocks of what we integrate with)."""
