"""Where the checkout the tests run from lies (PYTEST_DONT_REWRITE: a helper module, no assertions)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
