"""The lanes answer (`GET /lanes`, the MCP tool `lanes`: emem_client.service.caller_lanes) says what the
database decides for the caller's role: the lane isolation by its mode's name, on a database made for the
module (tests/client/front_ends.py)."""

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from front_ends import World, http_call, http_service, mcp_call


def lanes_over_both(world: World, role: str) -> dict[str, Any]:
    """The lanes answer over MCP, checked to be the HTTP service's too."""
    answer = mcp_call(world.dsn(world.login), world.embeddings_url, role, "lanes", {})
    assert not answer.tool.is_error, answer.mcp_text
    with http_service(world, world.dsn(world.login), world.embeddings_url) as http:
        assert http_call(http, world, "GET", "/lanes", role).body == answer.tool.structured_content
    return answer.tool.structured_content


@pytest.fixture
def owner(world: World) -> Iterator[psycopg.Connection]:
    """A superuser connection to the module's database; the profiles' settings are as the module made them
    again afterwards."""
    with psycopg.connect(world.dsn(), autocommit=True) as connection:
        try:
            yield connection
        finally:
            connection.execute("select emem.set_agent_setting('worker', 'emem.lane_isolation', null)")


@pytest.mark.parametrize(
    ("set_to", "reported"),
    [(None, "page_filter"), ("page_filter", "page_filter"), ("seed", "page_filter"), ("Strict", "strict")],
)
def test_the_lane_isolation_is_named_as_the_database_names_it(
    world: World, owner: psycopg.Connection, set_to: str | None, reported: str
) -> None:
    """page_filter (the default) or strict; `seed`, the old name of page_filter, is still accepted when set."""
    owner.execute("select emem.set_agent_setting('worker', 'emem.lane_isolation', %s)", (set_to,))
    lanes = lanes_over_both(world, world.agent)
    assert lanes["lane_isolation"] == reported
    assert f"lane isolation {reported}: " in lanes["explanation"]
