"""The OpenAI-compatible gateway against a real local HTTP server (tests/client/embeddings_service.py),
and what health and find make of each way it can fail.
"""

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from clusters import free_port
from embeddings_service import FakeService, vector_for

from emem_client import Client, GatewayError, OpenAIGateway, fingerprint_of

MODEL = "fake-embed-8"
QUESTION = "When is invoice INV-2031 from Kowalski due?"
CONTENTS = [QUESTION, "The office plants need water", "Lunch is at noon on Fridays"]


@pytest.fixture
def make_gateway() -> Iterator[Callable[..., OpenAIGateway]]:
    made: list[OpenAIGateway] = []

    def make(base_url: str, model: str = MODEL, **options: Any) -> OpenAIGateway:
        options = {"timeout": 2.0, "retries": 0, "backoff": 0.01} | options
        made.append(OpenAIGateway(base_url, model, **options))
        return made[-1]

    yield make
    for gateway in made:
        gateway.close()


@pytest.fixture
def corpus(db: psycopg.Connection, service: FakeService, make_gateway: Callable[..., OpenAIGateway]) -> list[int]:
    """The space of the service's model, and three notes embedded through it."""
    db.execute("select emem.create_lane('work')")
    client = Client(db, make_gateway(service.base_url))
    client.ensure_space()
    vectors = client.embed(CONTENTS)
    return client.put_records(
        [
            {"kind": "note", "content": content, "lane": "work", "vector": vector}
            for content, vector in zip(CONTENTS, vectors, strict=True)
        ]
    )


def test_a_matching_gateway_gives_ok_health_and_a_full_find(
    db: psycopg.Connection, service: FakeService, make_gateway: Callable[..., OpenAIGateway], corpus: list[int]
) -> None:
    client = Client(db, make_gateway(service.base_url))
    assert client.health().status == "ok"
    page = client.find(QUESTION)
    assert not page.degraded
    assert page.rows[0].record_id == corpus[0]
    assert page.rows[0].distance == pytest.approx(0.0, abs=1e-6)
    assert service.behaviour.requests[-1]["path"] == "/v1/embeddings"
    assert service.behaviour.requests[-1]["body"] == {"model": MODEL, "input": [QUESTION]}


def test_a_gateway_with_nothing_listening_is_down(
    db: psycopg.Connection, corpus: list[int], make_gateway: Callable[..., OpenAIGateway]
) -> None:
    client = Client(db, make_gateway(f"http://127.0.0.1:{free_port()}/v1", retries=1))
    page = client.find(QUESTION)
    assert (page.degraded, page.degraded_reason) == (True, "gateway_down")
    assert corpus[0] in {row.record_id for row in page.rows}  # full text still answers
    health = client.health()
    assert (health.status, health.reasons, health.gateway_reason) == (
        "degraded",
        ["declaration_unreadable"],
        "gateway_down",
    )


def test_a_gateway_that_answers_too_late_times_out(
    db: psycopg.Connection, service: FakeService, corpus: list[int], make_gateway: Callable[..., OpenAIGateway]
) -> None:
    service.behaviour.delay = 1.0
    started = time.monotonic()
    page = Client(db, make_gateway(service.base_url, timeout=0.2)).find(QUESTION)
    assert (page.degraded, page.degraded_reason) == (True, "gateway_timeout")
    assert time.monotonic() - started < 0.9


def test_another_model_name_is_a_model_mismatch(
    db: psycopg.Connection, service: FakeService, corpus: list[int], make_gateway: Callable[..., OpenAIGateway]
) -> None:
    client = Client(db, make_gateway(service.base_url, model="fake-embed-8-renamed"))
    assert client.health().reasons == ["model_mismatch"]
    page = client.find(QUESTION)
    assert (page.degraded, page.degraded_reason) == (True, "declaration_mismatch")


def test_another_dimension_is_a_dimension_mismatch(
    db: psycopg.Connection, service: FakeService, corpus: list[int], make_gateway: Callable[..., OpenAIGateway]
) -> None:
    service.behaviour.dimension = 16
    client = Client(db, make_gateway(service.base_url))
    assert client.health().reasons == ["dimension_mismatch", "fingerprint_mismatch"]
    assert client.find(QUESTION).degraded_reason == "declaration_mismatch"


def test_the_same_name_with_other_vectors_is_a_fingerprint_mismatch(
    db: psycopg.Connection, service: FakeService, corpus: list[int], make_gateway: Callable[..., OpenAIGateway]
) -> None:
    service.behaviour.variant = "model-b"
    client = Client(db, make_gateway(service.base_url))
    assert client.health().reasons == ["fingerprint_mismatch"]
    assert client.find(QUESTION).degraded_reason == "declaration_mismatch"


def test_a_malformed_answer_is_a_bad_answer(
    db: psycopg.Connection, service: FakeService, corpus: list[int], make_gateway: Callable[..., OpenAIGateway]
) -> None:
    gateway = make_gateway(service.base_url)
    gateway.declaration()
    service.behaviour.garbage = True
    page = Client(db, gateway).find(QUESTION)
    assert (page.degraded, page.degraded_reason) == (True, "gateway_bad_answer")


def test_unavailable_answers_are_retried_with_backoff(
    service: FakeService, make_gateway: Callable[..., OpenAIGateway]
) -> None:
    service.behaviour.failures_left = 2
    assert len(make_gateway(service.base_url, retries=2).embed(["hello"])[0]) == 8
    assert len(service.behaviour.requests) == 3
    service.behaviour.failures_left = 2
    with pytest.raises(GatewayError) as failure:
        make_gateway(service.base_url, retries=1).embed(["hello"])
    assert failure.value.reason == "gateway_down"


def test_the_api_key_is_read_from_the_named_variable(
    service: FakeService, make_gateway: Callable[..., OpenAIGateway], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMEM_TEST_KEY", "sk-test")
    make_gateway(service.base_url, api_key_env="EMEM_TEST_KEY").embed(["hello"])
    monkeypatch.delenv("EMEM_TEST_KEY")
    make_gateway(service.base_url, api_key_env="EMEM_TEST_KEY").embed(["hello"])
    assert [request["authorization"] for request in service.behaviour.requests] == ["Bearer sk-test", None]


def test_embed_batches_long_inputs_and_keeps_their_order(
    service: FakeService, make_gateway: Callable[..., OpenAIGateway]
) -> None:
    texts = [f"text {n}" for n in range(5)]
    vectors = make_gateway(service.base_url, batch_size=2).embed(texts)
    assert vectors == [pytest.approx(vector_for(text, 8, "model-a")) for text in texts]
    assert [len(request["body"]["input"]) for request in service.behaviour.requests] == [2, 2, 1]


def test_the_declaration_is_cached_until_its_ttl(
    service: FakeService, make_gateway: Callable[..., OpenAIGateway]
) -> None:
    cached = make_gateway(service.base_url)
    assert cached.declaration() == cached.declaration()
    assert len(service.behaviour.requests) == 1
    expiring = make_gateway(service.base_url, declaration_ttl=0)
    first = expiring.declaration()
    service.behaviour.variant = "model-b"
    assert expiring.declaration().fingerprint != first.fingerprint


def test_the_fingerprint_ignores_scale_and_float_noise_but_not_another_model() -> None:
    vector = vector_for("probe", 384, "model-a")
    noisy = [2.5 * value + random.Random(n).uniform(-1e-6, 1e-6) for n, value in enumerate(vector)]
    assert fingerprint_of(noisy) == fingerprint_of(vector)
    assert fingerprint_of(vector_for("probe", 384, "model-b")) != fingerprint_of(vector)
    assert fingerprint_of(vector[:383]) != fingerprint_of(vector)
