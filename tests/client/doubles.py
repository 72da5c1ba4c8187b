"""Test doubles of the embedding gateway (not of PostgreSQL) and the small corpora the client's
tests share: hand-made 3-d vectors (StubGateway), hash vectors (HashGateway), and the
conversations ingest and the command line read."""

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from emem_client import GATEWAY_DOWN, GatewayError, ModelDeclaration

INVOICE_AXIS = [1.0, 0.0, 0.0]
WEATHER_AXIS = [0.0, 1.0, 0.0]
MEETING_AXIS = [0.0, 0.0, 1.0]
DAY = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


class StubGateway:
    """Answers each known text with its vector; `failure` makes every call raise it instead."""

    def __init__(self, vectors: dict[str, list[float]], model_name: str = "stub-3d", dimension: int = 3) -> None:
        self.vectors = vectors
        self.model_name = model_name
        self.dimension = dimension
        self.failure: GatewayError | None = None
        self.embedded: list[str] = []

    def declaration(self) -> ModelDeclaration:
        self._fail_if_asked()
        return ModelDeclaration(self.model_name, self.dimension, "stub-fingerprint")

    def embed(self, texts: list[str]) -> list[list[float]]:
        self._fail_if_asked()
        self.embedded.extend(texts)
        return [self.vectors.get(text, MEETING_AXIS) for text in texts]

    def _fail_if_asked(self) -> None:
        if self.failure is not None:
            raise self.failure


class HashGateway:
    """Deterministic vectors: 8 coordinates from the SHA-256 of the text; records what it embedded."""

    def __init__(self, model_name: str = "test-hash-8") -> None:
        self.model_name = model_name
        self.embedded: list[str] = []

    def declaration(self) -> ModelDeclaration:
        return ModelDeclaration(self.model_name, 8, "hash-8")

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.embedded.extend(texts)
        return [hash_vector(text) for text in texts]


def hash_vector(text: str) -> list[float]:
    return [(byte + 1) / 256 for byte in hashlib.sha256(text.encode()).digest()[:8]]


class FileSwitchedGateway(HashGateway):
    """HashGateway that fails (gateway_down) while the file `switch` exists."""

    def __init__(self, switch: Path) -> None:
        super().__init__()
        self.switch = switch

    def declaration(self) -> ModelDeclaration:
        self._fail_when_down()
        return super().declaration()

    def embed(self, texts: list[str]) -> list[list[float]]:
        self._fail_when_down()
        return super().embed(texts)

    def _fail_when_down(self) -> None:
        if self.switch.exists():
            raise GatewayError(GATEWAY_DOWN, "switched off by the test")


CONVERSATIONS = [
    {
        "id": "standup-1",
        "tags": ["ops"],
        "occurred_at": "2024-03-04T09:00:00Z",
        "turns": [
            {"speaker": "Maya", "content": "The finance export failed again, ticket OPS-1432."},
            {"speaker": "Tomás", "content": "It runs on the replica now."},
            {"speaker": "Maya", "content": "Yes, since two weeks.", "occurred_at": "2024-03-04T09:02:00Z"},
            "Then let us turn on hot_standby_feedback.",
        ],
    },
    {
        "id": "review-2",
        "lane": "docs",
        "turns": [
            {"speaker": "Priya", "content": "Disk grew 40 GB."},
            {"speaker": "Jonas", "content": "Dead tuples pile up."},
        ],
    },
]


def missing_extension_message(name: str, db: psycopg.Connection) -> str:
    return (
        f'the emem extension is not installed in database "{name}" on {db.info.host}:{db.info.port}: connect to it as '
        "its owner or a superuser and run CREATE EXTENSION emem CASCADE;"
    )
