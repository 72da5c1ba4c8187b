"""The HTTP service's OpenAPI document describes what it sends: every status of every answer below is
declared for its route, and the body validates against the declared schema (JSON Schema 2020-12, as
OpenAPI 3.1 uses it). The answers cover each status the service sends: 200, 201, 400 (its own checks,
a body it refuses, the database's refusal), 401, 403, 409, 413, 421 and 503."""

import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
from front_ends import DOWN_GATEWAY, Proxy, World, http_service
from jsonschema import Draft202012Validator

from emem_client import __version__

STATUSES = {200, 201, 400, 401, 403, 409, 413, 421, 503}


def conforms(document: dict[str, Any], method: str, path: str, answer: httpx2.Response) -> None:
    declared = document["paths"][path][method.lower()]["responses"]
    assert str(answer.status_code) in declared, (method, path, answer.status_code, sorted(declared))
    content = declared[str(answer.status_code)].get("content", {}).get("application/json")
    assert content is not None, (method, path, answer.status_code)
    schema = {**content["schema"], "components": document["components"]}
    errors = [error.message for error in Draft202012Validator(schema).iter_errors(answer.json())]
    assert errors == [], (method, path, answer.status_code, errors)


def requests(world: World) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    """(method, path, the role whose token it sends, httpx arguments)."""
    agent = world.agent
    turn = {"kind": "conversation", "content": "one", "thread_id": f"t-{uuid.uuid4().hex}", "thread_position": 0}
    return [
        ("GET", "/find", agent, {"params": {"q": "INV-2031"}}),
        ("GET", "/explain", agent, {"params": {"q": "INV-2031"}}),
        ("GET", "/timeline", agent, {"params": {"from": "2024-01-01"}}),
        ("GET", "/health", agent, {}),
        ("GET", "/lanes", agent, {}),
        ("POST", "/records", agent, {"json": turn}),
        ("POST", "/records", agent, {"json": turn}),  # 409: the position is taken
        ("POST", "/edges", agent, {"json": {"from_record_id": 1, "to_record_id": 1, "relation": "is"}}),
        ("GET", "/find", agent, {"params": {"q": "x", "page_size": 0}}),
        ("GET", "/find", agent, {"params": {"q": "x", "page": 50000, "page_size": 3}}),
        ("POST", "/records", agent, {"json": {"kind": "note", "content": "x", "colour": "red"}}),
        ("POST", "/records", agent, {"content": b"{not json", "headers": {"Content-Type": "application/json"}}),
        ("GET", "/find", None, {"params": {"q": "x"}}),
        ("POST", "/records", agent, {"json": {"kind": "note", "content": "x", "lane": "other"}}),
        ("POST", "/records", agent, {"json": {"kind": "note", "content": "x" * 4000}}),
        ("GET", "/health", agent, {"headers": {"Host": "evil.example"}}),
    ]


def test_every_answer_is_declared_in_the_openapi_document(world: World) -> None:
    proxy = Proxy(world.host, world.port)
    seen: set[int] = set()
    with http_service(world, world.dsn(world.login, port=proxy.port), DOWN_GATEWAY, max_body_bytes=2048) as http:
        document = http.get("/openapi.json").json()
        assert document["info"]["version"] == __version__
        for method, path, role, arguments in requests(world):
            headers = {"Authorization": f"Bearer {world.tokens[role]}"} if role else {}
            headers |= arguments.pop("headers", {})
            answer = http.request(method, path, **arguments, headers=headers)
            conforms(document, method, path, answer)
            seen.add(answer.status_code)
        proxy.down()
        time.sleep(0.1)
        answer = http.get("/find", params={"q": "x"}, headers={"Authorization": f"Bearer {world.tokens[world.agent]}"})
        conforms(document, "GET", "/find", answer)
        seen.add(answer.status_code)
    assert seen == STATUSES


def test_the_version_is_the_extensions_release() -> None:
    """One source: emem.control's default_version (setup.py gives it to the package)."""
    control = (Path(__file__).resolve().parents[2] / "emem.control").read_text()
    assert f"default_version = '{__version__}'" in control
