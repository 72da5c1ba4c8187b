"""The HTTP service on a real uvicorn server on loopback, through a real HTTP client.

The app runs on a psycopg_pool ConnectionPool to the test database, with HashGateway vectors.
"""

import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import httpx
import psycopg
import pytest
import uvicorn
from psycopg_pool import ConnectionPool
from test_ingest import HashGateway

from emem_client import GATEWAY_DOWN, Client, GatewayError, ModelDeclaration
from emem_client.http import create_app


class SwitchableGateway(HashGateway):
    """HashGateway that can be switched off (every call raises gateway_down)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def declaration(self) -> ModelDeclaration:
        self._fail_when_down()
        return super().declaration()

    def embed(self, texts: list[str]) -> list[list[float]]:
        self._fail_when_down()
        return super().embed(texts)

    def _fail_when_down(self) -> None:
        if self.down:
            raise GatewayError(GATEWAY_DOWN, "switched off by the test")


@pytest.fixture
def gateway() -> SwitchableGateway:
    return SwitchableGateway()


@pytest.fixture
def records(db: psycopg.Connection, gateway: SwitchableGateway) -> dict[str, int]:
    db.execute("select emem.create_lane('team')")
    db.execute(f"alter database {db.info.dbname} set timezone = 'Asia/Tokyo'")  # the service's sessions: UTC+9
    client = Client(db, gateway)
    client.ensure_space()
    contents = ["Maya: the finance export failed, ticket OPS-1432", "Tomás: it runs on the replica now"]
    ids = client.put_records(
        [
            {
                "kind": "conversation",
                "content": content,
                "lane": "team",
                "thread_id": "standup",
                "thread_position": n,
                "tags": ["ops"],
                "occurred_at": f"2024-03-04T09:0{n}:00Z",
                "vector": gateway.embed([content])[0],
            }
            for n, content in enumerate(contents)
        ]
    )
    client.put_window(ids, gateway.embed(["\n".join(contents)])[0])
    return dict(zip(["ops", "replica"], ids, strict=True))


@pytest.fixture
def service(dsn: Callable[..., str], gateway: SwitchableGateway, records: dict[str, int]) -> Iterator[httpx.Client]:
    """uvicorn serving the app on a free loopback port, in a thread; an HTTP client for it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    with ConnectionPool(dsn(), min_size=1, max_size=4, kwargs={"autocommit": True}) as pool:
        server = uvicorn.Server(uvicorn.Config(create_app(Client(pool, gateway)), log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started, "uvicorn did not start"
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            yield http
        server.should_exit = True
        thread.join(timeout=10)
    listener.close()


def test_openapi_describes_find_timeline_and_health(service: httpx.Client) -> None:
    answer = service.get("/openapi.json")
    assert answer.status_code == 200
    spec = answer.json()
    assert {"/find", "/timeline", "/health"} <= set(spec["paths"])
    assert {p["name"] for p in spec["paths"]["/find"]["get"]["parameters"]} == {"q", "page", "page_size"}
    assert {p["name"] for p in spec["paths"]["/timeline"]["get"]["parameters"]} >= {"from", "to", "kind", "tag"}
    assert "FindPage" in spec["components"]["schemas"]


def test_find_returns_a_page_with_its_totals(service: httpx.Client, records: dict[str, int]) -> None:
    answer = service.get("/find", params={"q": "Who filed OPS-1432?", "page_size": 1})
    assert answer.status_code == 200
    page = answer.json()
    assert (page["page"], page["page_size"], page["total_candidates"], page["total_pages"]) == (1, 1, 2, 2)
    assert page["degraded"] is False
    [row] = page["rows"]
    assert set(row) == {
        "rank",
        "record_id",
        "kind",
        "lane",
        "content",
        "tags",
        "distance",
        "distance_kind",
        "placed_by",
        "found_by",
        "windows",
    }
    assert row["rank"] == 1 and row["distance_kind"] == "cosine"


def test_find_answers_degraded_while_the_gateway_is_down(
    service: httpx.Client, gateway: SwitchableGateway, records: dict[str, int]
) -> None:
    gateway.down = True
    page = service.get("/find", params={"q": "Who filed OPS-1432?"}).json()
    assert (page["degraded"], page["degraded_reason"]) == (True, "gateway_down")
    assert [row["record_id"] for row in page["rows"]] == [records["ops"]]
    assert page["rows"][0]["distance_kind"] == "placeholder"


def test_timeline_lists_records_by_date_with_filters(service: httpx.Client, records: dict[str, int]) -> None:
    answer = service.get(
        "/timeline",
        params={"from": "2024-03-04T00:00:00Z", "to": "2024-03-05T00:00:00Z", "kind": "conversation", "tag": "ops"},
    )
    assert answer.status_code == 200
    assert [(r["record_id"], datetime.fromisoformat(r["occurred_at"])) for r in answer.json()] == [
        (records["ops"], datetime(2024, 3, 4, 9, 0, tzinfo=UTC)),
        (records["replica"], datetime(2024, 3, 4, 9, 1, tzinfo=UTC)),
    ]
    later = service.get("/timeline", params={"from": "2024-03-04T09:00:30", "to": "2024-03-05"})  # no zone: UTC
    assert [r["record_id"] for r in later.json()] == [records["replica"]]


def test_health_is_200_ok_or_degraded_with_reasons(service: httpx.Client, gateway: SwitchableGateway) -> None:
    answer = service.get("/health")
    assert (answer.status_code, answer.json()["status"], answer.json()["reasons"]) == (200, "ok", [])
    gateway.down = True
    answer = service.get("/health")
    assert answer.status_code == 200
    assert (answer.json()["status"], answer.json()["reasons"]) == ("degraded", ["declaration_unreadable"])
    assert answer.json()["gateway_reason"] == "gateway_down"
    gateway.down, gateway.model_name = False, "another-model"
    assert service.get("/health").json()["reasons"] == ["model_mismatch"]


def test_bad_arguments_are_client_errors(service: httpx.Client) -> None:
    assert service.get("/find").status_code == 422  # no question
    assert service.get("/find", params={"q": "x", "page": 0}).status_code == 422
    answer = service.get("/timeline", params={"from": "2024-03-05", "to": "2024-03-04"})
    assert answer.status_code == 400
    assert answer.json()["sqlstate"] == "22023"
    assert "the timeline needs from_time <= to_time" in answer.json()["detail"]
    answer = service.get("/timeline", params={"from": "2024-03-04", "to": "2024-03-05", "kind": "memo"})
    assert (answer.status_code, answer.json()["hint"]) == (400, "Accepted kinds: note, conversation, file, entity.")
