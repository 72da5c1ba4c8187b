"""The HTTP service, run as a real server process (uvicorn with the app factory) on loopback and
probed with a real HTTP client.

The service connects as a login role of its own (NOINHERIT) that may SET ROLE to three roles:
two agents bound to profiles reading lane `team` or lane `other`, and an auditor with BYPASSRLS.
Each has a bearer token in the tokens file. The gateway is the tests' deterministic HashGateway,
switched off while a file exists.
"""

import hashlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from doubles import HashGateway
from http_service import ServiceProcess
from queries import scalar

from emem_client import Client
from emem_client.access import new_token

ENDPOINTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/find", {"params": {"q": "ops"}}),
    ("GET", "/explain", {"params": {"q": "ops"}}),
    ("GET", "/timeline", {"params": {"from": "2024-01-01"}}),
    ("GET", "/health", {}),
    ("POST", "/records", {"json": {"kind": "note", "content": "x", "lane": "team"}}),
    ("POST", "/edges", {"json": {"from_record_id": 1, "to_record_id": 2, "relation": "r"}}),
]


@dataclass
class Access:
    """The roles behind the tokens, the tokens, and the service's login role."""

    roles: dict[str, str]
    tokens: dict[str, str]
    login_role: str
    tokens_file: Path

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@pytest.fixture
def records(db: psycopg.Connection) -> dict[str, int]:
    """Two conversation turns in lane `team` (with vectors and a window), one note in lane `other`."""
    for lane in ("team", "other"):
        db.execute("select emem.create_lane(%s)", (lane,))
    db.execute(f"alter database {db.info.dbname} set timezone = 'Asia/Tokyo'")  # sessions' default: UTC+9
    gateway = HashGateway()
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
    other = client.put_record("note", "Other lane: ops budget OPS-1432 is secret", "other", ["ops"])
    return {"ops": ids[0], "replica": ids[1], "other": other}


@pytest.fixture
def access(db: psycopg.Connection, make_role: Callable[..., str], tmp_path: Path, records: dict[str, int]) -> Access:
    db.execute("select emem.create_agent_profile('team-agent', array['team'])")
    db.execute("select emem.create_agent_profile('other-agent', array['other'])")
    roles = {
        "team": make_role("team", profile="team-agent"),
        "other": make_role("other", profile="other-agent"),
        "auditor": make_role("auditor"),
    }
    db.execute(f"alter role {roles['auditor']} bypassrls")
    login_role = make_role("service")
    db.execute(f"alter role {login_role} noinherit")
    db.execute(f"grant {', '.join(roles.values())} to {login_role}")
    tokens = {who: new_token() for who in roles}
    entries = []
    for who, role in roles.items():
        # The agent of lane `other` has a plain token; the others are stored as hashes.
        secret = (
            f'token = "{tokens[who]}"'
            if who == "other"
            else f'sha256 = "{hashlib.sha256(tokens[who].encode()).hexdigest()}"'
        )
        entries.append(f'[[token]]\nrole = "{role}"\n{secret}\nname = "{who}"\n')
    tokens_file = tmp_path / "tokens.toml"
    tokens_file.write_text("\n".join(entries))
    tokens_file.chmod(0o600)
    return Access(roles, tokens, login_role, tokens_file)


@pytest.fixture
def gateway_switch(tmp_path: Path) -> Path:
    """While this file exists, the service's gateway is down."""
    return tmp_path / "gateway-down"


@pytest.fixture
def start_service(
    dsn: Callable[..., str], access: Access, gateway_switch: Path, records: dict[str, int]
) -> Iterator[Callable[..., ServiceProcess]]:
    """Starts the service (uvicorn --factory) with EMEM_* settings; stops it afterwards."""
    started: list[ServiceProcess] = []

    def start(**settings: str) -> ServiceProcess:
        env = {
            "EMEM_DSN": dsn(access.login_role),
            "EMEM_TOKENS_FILE": str(access.tokens_file),
            "EMEM_TEST_GATEWAY_SWITCH": str(gateway_switch),
            **settings,
        }
        started.append(ServiceProcess.uvicorn(env))
        return started[-1]

    yield start
    for service in started:
        service.stop()


@pytest.fixture
def service(start_service: Callable[..., ServiceProcess]) -> ServiceProcess:
    return start_service()


def rows_of(answer: httpx.Response) -> list[int]:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return [row["record_id"] for row in (body["rows"] if isinstance(body, dict) else body)]


# ---- what it serves ---------------------------------------------------------------------------------


def test_openapi_describes_every_endpoint_and_carries_the_package_version(service: ServiceProcess) -> None:
    answer = service.http.get("/openapi.json")
    assert answer.status_code == 200
    spec = answer.json()
    assert spec["info"]["version"] == version("emem-client")
    assert {"/find", "/explain", "/timeline", "/health", "/records", "/edges"} <= set(spec["paths"])
    assert {p["name"] for p in spec["paths"]["/find"]["get"]["parameters"]} == {"q", "page", "page_size"}
    assert {p["name"] for p in spec["paths"]["/timeline"]["get"]["parameters"]} >= {"from", "to", "kind", "tag"}
    to = next(p for p in spec["paths"]["/timeline"]["get"]["parameters"] if p["name"] == "to")
    assert to["required"] is False
    assert "FindPage" in spec["components"]["schemas"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_find_returns_a_page_with_its_totals(service: ServiceProcess, access: Access, records: dict[str, int]) -> None:
    answer = service.http.get(
        "/find", params={"q": "Who filed OPS-1432?", "page_size": 1}, headers=access.headers("team")
    )
    assert answer.status_code == 200
    page = answer.json()
    # Totals count every lane (the page rule); the row is of the caller's lane.
    assert (page["page"], page["page_size"], page["total_candidates"], page["degraded"]) == (1, 1, 3, False)
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
    assert row["lane"] == "team" and row["distance_kind"] == "cosine"


def test_find_answers_degraded_while_the_gateway_is_down(
    service: ServiceProcess, access: Access, gateway_switch: Path, records: dict[str, int]
) -> None:
    gateway_switch.touch()
    page = service.http.get("/find", params={"q": "Who filed OPS-1432?"}, headers=access.headers("team")).json()
    assert (page["degraded"], page["degraded_reason"]) == (True, "gateway_down")
    assert [row["record_id"] for row in page["rows"]] == [records["ops"]]
    assert page["rows"][0]["distance_kind"] == "placeholder"


def test_timeline_dates_are_iso_8601_in_utc_and_to_is_optional(
    service: ServiceProcess, access: Access, records: dict[str, int]
) -> None:
    answer = service.http.get(
        "/timeline",
        params={"from": "2024-03-04T00:00:00Z", "to": "2024-03-05T00:00:00Z", "kind": "conversation", "tag": "ops"},
        headers=access.headers("team"),
    )
    assert answer.status_code == 200
    assert [(r["record_id"], r["occurred_at"]) for r in answer.json()] == [
        (records["ops"], "2024-03-04T09:00:00Z"),
        (records["replica"], "2024-03-04T09:01:00Z"),
    ]
    created = datetime.fromisoformat(answer.json()[0]["created_at"])
    assert created.utcoffset() == timedelta(0) and abs(datetime.now(UTC) - created) < timedelta(minutes=5)
    # No zone: UTC. No `to`: now.
    later = service.http.get("/timeline", params={"from": "2024-03-04T09:00:30"}, headers=access.headers("team"))
    assert rows_of(later) == [records["replica"]]


def test_health_is_200_ok_or_degraded_with_reasons(
    service: ServiceProcess, access: Access, gateway_switch: Path
) -> None:
    answer = service.http.get("/health", headers=access.headers("team"))
    assert (answer.status_code, answer.json()["status"], answer.json()["reasons"]) == (200, "ok", [])
    gateway_switch.touch()
    answer = service.http.get("/health", headers=access.headers("team"))
    assert answer.status_code == 200
    assert (answer.json()["status"], answer.json()["reasons"]) == ("degraded", ["declaration_unreadable"])
    assert answer.json()["gateway_reason"] == "gateway_down"


# ---- tokens and roles -------------------------------------------------------------------------------


def test_no_token_or_a_wrong_one_gets_401_with_a_bearer_challenge(service: ServiceProcess, access: Access) -> None:
    wrong = [None, "Bearer not-a-token-of-the-file", "Basic dXNlcjpwdw==", "Bearer", f"Bearer {access.tokens['team']}x"]
    for method, path, request_args in ENDPOINTS:
        for authorization in wrong:
            headers = {"Authorization": authorization} if authorization else {}
            answer = service.http.request(method, path, headers=headers, **request_args)
            assert answer.status_code == 401, (method, path, authorization)
            assert answer.headers["www-authenticate"].startswith('Bearer realm="emem"')
            assert "token" in answer.json()["detail"]


def test_each_token_acts_as_its_role_and_reads_its_own_lanes(
    start_service: Callable[..., ServiceProcess], access: Access, records: dict[str, int]
) -> None:
    # One pooled connection: every request sets its own role on it, none inherits the last one's.
    service = start_service(EMEM_POOL_SIZE="1")
    expected = {"team": {records["ops"], records["replica"]}, "other": {records["other"]}}
    for _ in range(3):
        for who in ("team", "other", "auditor"):
            found = set(rows_of(service.http.get("/find", params={"q": "ops OPS-1432"}, headers=access.headers(who))))
            timeline = service.http.get("/timeline", params={"from": "2000-01-01"}, headers=access.headers(who))
            assert found == set(rows_of(timeline)) == expected.get(who, set(records.values())), who


def test_a_role_writes_only_into_its_own_lanes(
    service: ServiceProcess, access: Access, records: dict[str, int], db: psycopg.Connection
) -> None:
    answer = service.http.post(
        "/records", json={"kind": "note", "content": "planted", "lane": "other"}, headers=access.headers("team")
    )
    assert answer.status_code == 403
    assert "lane 'other' is not a lane this role may write" in answer.json()["detail"]
    answer = service.http.post(
        "/edges",
        json={"from_record_id": records["ops"], "to_record_id": records["other"], "relation": "leaks"},
        headers=access.headers("team"),
    )
    # The record of the other lane is unknown to this role, exactly as a record that does not exist.
    assert (answer.status_code, answer.json()["detail"]) == (400, f"unknown to record {records['other']}")
    assert scalar(db, "select count(*) from emem.records where content = 'planted'") == 0


def test_explain_counts_across_lanes_only_for_roles_that_read_every_lane(
    service: ServiceProcess, access: Access, records: dict[str, int]
) -> None:
    """explain's counts span every lane: an agent under page_filter gets how find reads the question
    and its own rows' provenance, as over MCP and on the command line (the database decides)."""
    for who in ("team", "other"):
        answer = service.http.get("/explain", params={"q": "OPS-1432"}, headers=access.headers(who))
        assert answer.status_code == 200
        explanation = answer.json()
        assert "lookups" not in explanation and "merge_milliseconds" not in explanation
        assert all("list_ranks" not in row for row in explanation["rows"])
        assert explanation["question"]["unknown_terms"] == ["OPS-1432"]
    answer = service.http.get("/explain", params={"q": "OPS-1432"}, headers=access.headers("auditor"))
    assert answer.status_code == 200
    explanation = answer.json()
    assert explanation["lookups"]["fulltext"]["candidates"] == 2
    assert {row["record_id"] for row in explanation["rows"]} >= {records["ops"], records["other"]}


# ---- Host names -------------------------------------------------------------------------------------


def test_a_host_header_off_the_allow_list_gets_421(
    start_service: Callable[..., ServiceProcess], access: Access
) -> None:
    service = start_service(EMEM_ALLOWED_HOSTS="emem.internal")
    headers = access.headers("team")
    for host in ("attacker.example", "attacker.example:8000", "127.0.0.1.attacker.example", "emem.internal.evil"):
        answer = service.http.get("/health", headers={**headers, "Host": host})
        assert answer.status_code == 421, host
        assert "Host header" in answer.json()["detail"]
    for host in ("localhost", f"localhost:{service.port}", f"127.0.0.1:{service.port}", "[::1]:80", "EMEM.internal"):
        assert service.http.get("/health", headers={**headers, "Host": host}).status_code == 200, host


def test_a_request_without_a_host_header_gets_421(service: ServiceProcess) -> None:
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as raw:
        raw.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        assert raw.recv(100).split(b"\r\n")[0].split(b" ")[1] == b"421"


# ---- limits -----------------------------------------------------------------------------------------


def test_a_statement_timeout_frees_the_pool_from_slow_requests(
    start_service: Callable[..., ServiceProcess], access: Access, dsn: Callable[..., str]
) -> None:
    """Finds that cannot finish (here: their tags are locked) hold a pooled connection only for the
    statement timeout; meanwhile requests that can finish keep being served."""
    service = start_service(EMEM_POOL_SIZE="2", EMEM_STATEMENT_TIMEOUT="1", EMEM_POOL_TIMEOUT="10")
    answers: list[httpx.Response] = []
    with psycopg.connect(dsn()) as blocker:
        blocker.execute("lock table emem.record_tags in access exclusive mode")
        began = time.monotonic()

        def ask() -> None:
            answers.append(service.http.get("/find", params={"q": "ops"}, headers=access.headers("team"), timeout=20))

        askers = [threading.Thread(target=ask) for _ in range(6)]
        for asker in askers:
            asker.start()
        time.sleep(0.5)
        health = service.http.get("/health", headers=access.headers("team"), timeout=20)
        for asker in askers:
            asker.join(30)
        elapsed = time.monotonic() - began
    assert health.status_code == 200
    assert [answer.status_code for answer in answers] == [503] * 6
    assert answers[0].json()["detail"] == "the database did not answer within the statement timeout"
    assert answers[0].json()["situation"] == "unavailable"
    assert answers[0].headers["retry-after"] == "1"
    assert elapsed < 8, f"six finds on two connections took {elapsed:.1f} s"
    assert rows_of(service.http.get("/find", params={"q": "ops"}, headers=access.headers("team")))


def test_questions_and_bodies_have_size_limits(start_service: Callable[..., ServiceProcess], access: Access) -> None:
    service = start_service(EMEM_MAX_QUESTION_CHARS="100", EMEM_MAX_BODY_BYTES="2048")
    headers = access.headers("team")
    assert service.http.get("/find", params={"q": "é" * 100}, headers=headers).status_code == 200
    answer = service.http.get("/find", params={"q": "é" * 101}, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["detail"] == "q: String should have at most 100 characters"
    body = {"kind": "note", "content": "x" * 3000, "lane": "team"}
    answer = service.http.post("/records", json=body, headers=headers)
    assert answer.status_code == 413
    assert "2048 bytes" in answer.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body is counted as it arrives
        yield b'{"kind": "note", "lane": "team", "content": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}'

    answer = service.http.post("/records", content=chunks(), headers={**headers, "Content-Type": "application/json"})
    assert answer.status_code == 413


BAD_QUERIES = [
    ("/find", {"q": "ops\x00"}, "q: must not contain NUL characters"),
    ("/find", {}, "q: Field required"),
    ("/find", {"q": ""}, "q: String should have at least 1 character"),
    ("/find", {"q": "ops", "page": "100001"}, "page: Input should be less than or equal to 100000"),
    ("/find", {"q": "ops", "page": str(10**30)}, "page: Input should be less than or equal to 100000"),
    ("/find", {"q": "ops", "page": "100000", "page_size": "2"}, "page 100000 of 2 reaches record 200000"),
    ("/find", {"q": "ops", "page": "0"}, "page: Input should be greater than or equal to 1"),
    ("/find", {"q": "ops", "page": "-1"}, "page: Input should be greater than or equal to 1"),
    ("/find", {"q": "ops", "page": "two"}, "page: Input should be a valid integer"),
    ("/find", {"q": "ops", "page": "1.5"}, "page: Input should be a valid integer"),
    ("/find", {"q": "ops", "page_size": "0"}, "page_size: Input should be greater than or equal to 1"),
    ("/find", {"q": "ops", "page_size": "-30"}, "page_size: Input should be greater than or equal to 1"),
    ("/find", {"q": "ops", "page_size": "1001"}, "page_size: Input should be less than or equal to 1000"),
    ("/timeline", {}, "from: Field required"),
    ("/timeline", {"from": "yesterday"}, "from: 'yesterday' is not an ISO 8601 date or time"),
    ("/timeline", {"from": "2024-13-01"}, "from: '2024-13-01' is not an ISO 8601 date or time"),
    ("/timeline", {"from": "1709500000"}, "from: '1709500000' is not an ISO 8601 date or time"),
    ("/timeline", {"from": "2024-03-01", "to": "2024\x00"}, "to: must not contain NUL characters"),
    ("/timeline", {"from": "2024-03-05", "to": "2024-03-04"}, "the timeline needs from_time <= to_time"),
    ("/timeline", {"from": "2024-03-01", "kind": "memo"}, "holds an unknown kind"),
    ("/timeline", {"from": "2024-03-01", "tag": "a\x00b"}, "tag: must not contain NUL characters"),
    ("/timeline", {"from": "2024-03-01", "page": "2147483648"}, "page: Input should be less than or equal to"),
]


def test_every_bad_parameter_is_400_with_a_clear_message(service: ServiceProcess, access: Access) -> None:
    for path, params, message in BAD_QUERIES:
        answer = service.http.get(path, params=params, headers=access.headers("team"))
        assert answer.status_code == 400, (params, answer.text)
        assert message in answer.json()["detail"], params


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


BAD_RECORDS: list[tuple[dict[str, Any], str]] = [
    ({"kind": "memo"}, "item 1: kind must be one of note, conversation, file, entity"),
    ({"content": "   "}, "item 1: content must be a non-empty text"),
    ({"content": "a\x00b"}, "content: must not contain NUL characters"),
    ({"lane": "nowhere"}, "lane 'nowhere' is not a lane this role may write"),
    ({"tags": ["ok", ""]}, "tags must be an array of at most 1000 texts of 1 to 200 characters"),
    ({"authority": 2}, "authority must be a number from 0 to 1"),
    ({"occurred_at": "last week"}, "occurred_at: 'last week' is not an ISO 8601 date or time"),
    ({"metadata": {"k": "v\x00"}}, "metadata: must not contain NUL characters"),
    ({"metadata": deep(100)}, "metadata: nests deeper than 64 levels"),
    ({"metadata": [1]}, "metadata: Input should be a valid dictionary"),
    ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
    ({"thread_position": 3}, "only conversation and file records have a thread_id and thread_position"),
]


def test_a_bad_record_is_refused_with_the_message_of_whoever_refused_it(
    service: ServiceProcess, access: Access
) -> None:
    for change, message in BAD_RECORDS:
        body = {"kind": "note", "content": "a note", "lane": "team", **change}
        answer = service.http.post("/records", json=body, headers=access.headers("team"))
        assert answer.status_code == (403 if "lane" in change else 400), (change, answer.text)
        assert message in answer.json()["detail"], change


MALFORMED_BODIES = [
    (b'{"kind": "note", "content": "x", "lane": "team", "authority": NaN}', "authority"),
    (b'{"kind": "note", "content": "x", "lane": "team", "metadata": {"n": Infinity}}', "NaN or infinity"),
    (b'{"kind": "note", "content": ', "JSON decode error"),
    (b"[" * 5000 + b"]" * 5000, ""),
    (b'{"kind": "note", "content": "x", "lane": "team", "metadata": ' + b'{"a":' * 900 + b"1" + b"}" * 901, ""),
]


def test_malformed_json_bodies_are_400(service: ServiceProcess, access: Access) -> None:
    headers = {**access.headers("team"), "Content-Type": "application/json"}
    for body, message in MALFORMED_BODIES:
        answer = service.http.post("/records", content=body, headers=headers)
        assert answer.status_code == 400, (body[:80], answer.text)
        assert message in answer.json()["detail"], body[:80]


# ---- writes -----------------------------------------------------------------------------------------


def test_remember_a_record_with_a_vector_then_find_it(
    service: ServiceProcess, access: Access, db: psycopg.Connection
) -> None:
    body = {
        "kind": "note",
        "content": "Invoice INV-7781 was paid by Kowalski",
        "lane": "team",
        "tags": ["invoice"],
        "occurred_at": "2024-05-01T10:00:00+02:00",
        "metadata": {"source": "mail"},
        "source_key": "mail:42",
    }
    answer = service.http.post("/records", json=body, headers=access.headers("team"))
    assert answer.status_code == 201, answer.text
    written = answer.json()
    assert (written["created"], written["embedded"], written["embedding_problem"]) == (True, True, None)
    record_id = written["record_id"]
    stored = db.execute(
        "select r.lane_name, r.occurred_at, r.metadata, count(v.record_id) from emem.records r"
        " left join emem.record_vectors v using (record_id) where r.record_id = %s group by 1, 2, 3",
        (record_id,),
    ).fetchone()
    assert stored == ("team", datetime(2024, 5, 1, 8, tzinfo=UTC), {"source": "mail"}, 1)
    again = service.http.post("/records", json=body, headers=access.headers("team")).json()
    assert (again["record_id"], again["created"]) == (record_id, False)
    page = service.http.get("/find", params={"q": "INV-7781"}, headers=access.headers("team")).json()
    [row] = [row for row in page["rows"] if row["record_id"] == record_id]
    assert ("fulltext" in row["found_by"], row["distance_kind"]) == (True, "cosine")
    assert record_id not in rows_of(
        service.http.get("/find", params={"q": "INV-7781"}, headers=access.headers("other"))
    )


def test_remember_without_a_vector_while_the_gateway_is_down_and_say_so(
    service: ServiceProcess, access: Access, gateway_switch: Path, db: psycopg.Connection
) -> None:
    gateway_switch.touch()
    answer = service.http.post(
        "/records",
        json={"kind": "note", "content": "written while down", "lane": "team"},
        headers=access.headers("team"),
    )
    assert answer.status_code == 201
    written = answer.json()
    assert (written["embedded"], written["embedding_problem"]) == (False, "gateway_down")
    assert scalar(db, "select count(*) from emem.record_vectors where record_id = %s", (written["record_id"],)) == 0


def test_link_records_with_a_relation_and_properties(
    service: ServiceProcess, access: Access, records: dict[str, int], db: psycopg.Connection
) -> None:
    link = {
        "from_record_id": records["ops"],
        "to_record_id": records["replica"],
        "relation": "answered by",
        "properties": {"ticket": "OPS-1432", "minutes": 1},
    }
    answer = service.http.post("/edges", json=link, headers=access.headers("team"))
    assert answer.status_code == 201, answer.text
    edge = db.execute(
        "select from_record_id, to_record_id, relation, properties from emem.edges where edge_id = %s",
        (answer.json()["edge_id"],),
    ).fetchone()
    assert edge == (records["ops"], records["replica"], "answered by", {"ticket": "OPS-1432", "minutes": 1})
    for change, message in (
        ({"relation": " "}, "relation must be a text of 1 to 200 characters"),
        ({"relation": "a\x00"}, "relation: must not contain NUL characters"),
        ({"to_record_id": 2**63}, "out of range"),
        ({"to_record_id": 987654}, "unknown to record 987654"),
        ({"properties": "x"}, "properties: Input should be a valid dictionary"),
    ):
        answer = service.http.post("/edges", json=link | change, headers=access.headers("team"))
        assert answer.status_code == 400, answer.text
        assert message in answer.json()["detail"]
