"""emem_client: the thin Python client of emem."""

from importlib.metadata import PackageNotFoundError, version

from emem_client.aio import AsyncClient
from emem_client.calls import NO_ACTIVE_SPACE, VECTORS_INCOMPLETE, ExtensionMissingError
from emem_client.client import Client
from emem_client.gateways import (
    DECLARATION_MISMATCH,
    DECLARATION_UNREADABLE,
    GATEWAY_BAD_ANSWER,
    GATEWAY_DOWN,
    GATEWAY_TIMEOUT,
    GATEWAY_UNAVAILABLE,
    EmbeddedGateway,
    Gateway,
    GatewayError,
    ModelDeclaration,
    OpenAIGateway,
    fingerprint_of,
)
from emem_client.types import EmbeddingCoverage, EmbeddingSpace, FindPage, FindRow, Health, RecordSummary

try:
    __version__ = version("emem-client")
except PackageNotFoundError:  # run from a checkout that pip did not install
    __version__ = "unknown"

__all__ = [
    "DECLARATION_MISMATCH",
    "DECLARATION_UNREADABLE",
    "GATEWAY_BAD_ANSWER",
    "GATEWAY_DOWN",
    "GATEWAY_TIMEOUT",
    "GATEWAY_UNAVAILABLE",
    "NO_ACTIVE_SPACE",
    "VECTORS_INCOMPLETE",
    "AsyncClient",
    "Client",
    "EmbeddedGateway",
    "EmbeddingCoverage",
    "EmbeddingSpace",
    "ExtensionMissingError",
    "FindPage",
    "FindRow",
    "Gateway",
    "GatewayError",
    "Health",
    "ModelDeclaration",
    "OpenAIGateway",
    "RecordSummary",
    "__version__",
    "fingerprint_of",
]
