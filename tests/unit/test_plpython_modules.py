"""The in-database modules outside the server, with a small fake of plpy."""

from typing import Any

import pytest
from fake_plpy import FakePlpy, FakePlpyError

from emem_db._version import VERSION
from emem_db.entry import STATE_KEY, Backend, backend


def test_loaded_modules_of_another_version_ask_to_reconnect() -> None:
    with pytest.raises(FakePlpyError, match=f"SQL is version 9.9.9 but .* at version {VERSION}") as raised:
        backend({}, FakePlpy(), "9.9.9")
    assert raised.value.fields["sqlstate"] == "55000"
    assert "reconnect" in raised.value.fields["hint"]


def test_a_state_an_earlier_release_left_in_the_backend_is_replaced() -> None:
    """Each release imports its own package (emem_db_<version>); a backend that ran the update from
    an earlier release holds that release's state under the same key: it is not reused."""
    cache: dict[str, Any] = {STATE_KEY: object()}
    assert isinstance(backend(cache, FakePlpy(), VERSION), Backend)


def test_backend_state_is_kept_between_calls() -> None:
    cache: dict[str, Any] = {}
    first = backend(cache, FakePlpy(), VERSION)
    assert backend(cache, FakePlpy(), VERSION) is first
    assert cache[STATE_KEY] is first
