"""emem_client: the thin Python client of emem."""

from emem_client.aio import AsyncClient
from emem_client.calls import NO_ACTIVE_SPACE
from emem_client.client import Client
from emem_client.gateways import (
    DECLARATION_MISMATCH,
    DECLARATION_UNREADABLE,
    GATEWAY_BAD_ANSWER,
    GATEWAY_DOWN,
    GATEWAY_TIMEOUT,
    EmbeddedGateway,
    Gateway,
    GatewayError,
    ModelDeclaration,
    OpenAIGateway,
    fingerprint_of,
)
from emem_client.types import EmbeddingSpace, FindPage, FindRow, Health, RecordSummary

__all__ = [
    "DECLARATION_MISMATCH",
    "DECLARATION_UNREADABLE",
    "GATEWAY_BAD_ANSWER",
    "GATEWAY_DOWN",
    "GATEWAY_TIMEOUT",
    "NO_ACTIVE_SPACE",
    "AsyncClient",
    "Client",
    "EmbeddedGateway",
    "EmbeddingSpace",
    "FindPage",
    "FindRow",
    "Gateway",
    "GatewayError",
    "Health",
    "ModelDeclaration",
    "OpenAIGateway",
    "RecordSummary",
    "fingerprint_of",
]
