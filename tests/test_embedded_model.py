"""The embedded default gateway, for real: all-MiniLM-L6-v2 loaded from its package, offline."""

import math

import psycopg
import pytest

from emem_client import Client, EmbeddedGateway, ModelDeclaration


@pytest.fixture(scope="module")
def gateway() -> EmbeddedGateway:
    return EmbeddedGateway()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


def test_the_embedded_model_gives_384_dimension_vectors(gateway: EmbeddedGateway) -> None:
    [vector] = gateway.embed(["The invoice for the Apollo migration is overdue."])
    assert len(vector) == 384
    assert math.hypot(*vector) == pytest.approx(1.0, abs=1e-4)


def test_paraphrases_are_closer_than_unrelated_sentences(gateway: EmbeddedGateway) -> None:
    paid, settled, weather = gateway.embed(
        [
            "Kowalski paid the invoice last week.",
            "Last week the bill was settled by Kowalski.",
            "Heavy rain is expected in the mountains tomorrow.",
        ]
    )
    assert cosine(paid, settled) > cosine(paid, weather) + 0.3


def test_the_declaration_names_the_model_with_a_pinned_fingerprint(gateway: EmbeddedGateway) -> None:
    # Pinned: another fingerprint for the same model would mark every existing space as mismatching.
    assert gateway.declaration() == ModelDeclaration(
        "sentence-transformers/all-MiniLM-L6-v2", 384, "extremes8:84fbf0d01871530d"
    )


def test_find_with_the_embedded_model_reaches_by_meaning(db: psycopg.Connection, gateway: EmbeddedGateway) -> None:
    db.execute("select emem.create_lane('work')")
    client = Client(db, gateway)
    client.ensure_space()
    contents = ["The quarterly budget was approved by the board.", "Our cat sleeps on the sofa all day."]
    ids = client.put_records(
        [
            {"kind": "note", "content": content, "lane": "work", "vector": vector}
            for content, vector in zip(contents, client.embed(contents), strict=True)
        ]
    )
    page = client.find("Did the directors sign off on the spending plan?")
    assert not page.degraded
    assert page.rows[0].record_id == ids[0]
    assert client.health().status == "ok"
