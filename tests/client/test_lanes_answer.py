"""The lanes answer (`GET /lanes`, the MCP tool `lanes`: emem_client.service.caller_lanes) says what the
database decides for the caller's role: the binding by the database's rule (name, OID and cluster), and the
lane isolation by its mode's name, on a database made for the module (tests/client/front_ends.py)."""

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from front_ends import World, http_call, http_service, mcp_call
from queries import row


def lanes_over_both(world: World, role: str) -> dict[str, Any]:
    """The lanes answer over MCP, checked to be the HTTP service's too."""
    answer = mcp_call(world.dsn(world.login), world.embeddings_url, role, "lanes", {})
    assert not answer.tool_result.is_error, answer.mcp_text
    lanes: dict[str, Any] = answer.tool_result.structured_content
    with http_service(world, world.dsn(world.login), world.embeddings_url) as http:
        assert http_call(http, world, "GET", "/lanes", role).body == lanes
    return lanes


def the_databases_rule(world: World, role: str) -> tuple[str | None, list[str]]:
    """The profile and the lanes the database gives the role, asked as that role."""
    with psycopg.connect(world.dsn(role), autocommit=True) as connection:
        profile, lanes = row(
            connection, "select emem.policy_profile(current_user), array(select emem.readable_lanes() order by 1)"
        )
    return profile, lanes


@pytest.fixture
def owner(world: World) -> Iterator[psycopg.Connection]:
    """A superuser connection to the module's database; the agent's binding and the profiles' settings are as
    the module made them again afterwards."""
    with psycopg.connect(world.dsn(), autocommit=True) as connection:
        try:
            yield connection
        finally:
            connection.execute("select emem.bind_role(%s, 'worker')", (world.agent,))
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


def test_a_binding_restored_from_another_cluster_holds_by_its_roles_name(
    world: World, owner: psycopg.Connection
) -> None:
    """After a restore into another cluster the binding's OID names no role here; the database binds by the
    name, and so does the lanes answer."""
    owner.execute(
        "update emem.role_profiles set role_id = 0, bound_in_cluster = 'another cluster' where role_name = %s",
        (world.agent,),
    )
    assert the_databases_rule(world, world.agent) == ("worker", ["work"])
    lanes = lanes_over_both(world, world.agent)
    assert (lanes["agent_profile"], lanes["reads"], lanes["writes"]) == ("worker", ["work"], ["work"])


def test_a_binding_whose_role_was_created_again_holds_for_no_one(world: World, owner: psycopg.Connection) -> None:
    """In the cluster it was made in, a binding whose OID is not the role's (dropped and created again under the
    same name) does not hold: the database gives the role nothing, and the lanes answer says so."""
    owner.execute("update emem.role_profiles set role_id = 0 where role_name = %s", (world.agent,))
    assert the_databases_rule(world, world.agent) == (None, [])
    lanes = lanes_over_both(world, world.agent)
    assert (lanes["agent_profile"], lanes["reads"], lanes["writes"]) == (None, [], [])
