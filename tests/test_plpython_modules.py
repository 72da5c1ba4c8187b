"""The in-database modules outside the server, with a small fake of plpy."""

from typing import Any

import pytest

from emem_db._version import VERSION
from emem_db.entry import STATE_KEY, backend


class FakePlpyError(Exception):
    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.fields = fields


class FakePlpy:
    def error(self, message: str, **fields: Any) -> None:
        raise FakePlpyError(message, **fields)


def test_loaded_modules_of_another_version_ask_to_reconnect() -> None:
    with pytest.raises(FakePlpyError, match=f"SQL is version 9.9.9 but .* at version {VERSION}") as raised:
        backend({}, FakePlpy(), "9.9.9")
    assert raised.value.fields["sqlstate"] == "55000"
    assert "reconnect" in raised.value.fields["hint"]


def test_modules_answer_the_sql_of_releases_that_call_them_alike() -> None:
    """0.2.1 changed no call into Python: a database still at 0.2.0 (or an update passing through
    it) is served; 0.1.1 is not."""
    assert backend({}, FakePlpy(), "0.2.0") is not None
    with pytest.raises(FakePlpyError, match=r"SQL is version 0\.1\.1"):
        backend({}, FakePlpy(), "0.1.1")


def test_backend_state_is_kept_between_calls() -> None:
    cache: dict = {}
    first = backend(cache, FakePlpy(), VERSION)
    assert backend(cache, FakePlpy(), VERSION) is first
    assert cache[STATE_KEY] is first
