"""Fixtures of the client's tests (the database ones come from tests/conftest.py)."""

from collections.abc import Iterator
from typing import Any

import pytest
from embeddings_service import FakeService, serving
from front_ends import World, made_world


@pytest.fixture
def service() -> Iterator[FakeService]:
    """A real OpenAI-compatible embeddings service on 127.0.0.1 (tests/client/embeddings_service.py)."""
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def world(server: None, postgresql_noproc: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A database of the module's own, with lanes, roles, tokens and a record (tests/client/front_ends.py)."""
    host, port, user = postgresql_noproc.host, int(postgresql_noproc.port), postgresql_noproc.user
    with made_world(host, port, user, tmp_path_factory.mktemp("world")) as made:
        yield made
