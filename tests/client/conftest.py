"""Fixtures of the client's tests (the database ones come from tests/conftest.py)."""

from collections.abc import Iterator

import pytest
from embeddings_service import FakeService, serving


@pytest.fixture
def service() -> Iterator[FakeService]:
    """A real OpenAI-compatible embeddings service on 127.0.0.1 (tests/client/embeddings_service.py)."""
    with serving() as running:
        yield running
