"""Where the tests and the repository are."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # python/tests
REPO = TESTS.parent.parent
