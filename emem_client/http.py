"""The HTTP service: GET /find, /timeline and /health over a Client on a connection pool.

    app = create_app(Client(pool, gateway))     # any ASGI server
    serve(conninfo, gateway, "127.0.0.1", 8000)  # uvicorn with a pool of its own

The OpenAPI description is at /openapi.json (and /docs). Database errors keep their meaning:
a value the SQL API refuses (SQLSTATE 22023) is 400, a lane the role may not read or write
(42501) is 403, an unreachable database 503.
"""

from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import psycopg
import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool, PoolTimeout

from emem_client.client import Client
from emem_client.gateways import Gateway
from emem_client.ingest import assume_utc
from emem_client.types import FindPage, Health, RecordSummary

STATUS_OF_SQLSTATE = {"22023": 400, "22007": 400, "22008": 400, "42501": 403}
POOL_WAIT_SECONDS = 10.0


def package_version() -> str:
    try:
        return version("emem-client")
    except PackageNotFoundError:
        return "unknown"


def create_app(client: Client) -> FastAPI:
    app = FastAPI(
        title="emem",
        version=package_version(),
        description="Hybrid memory retrieval for AI agents: four lookups (tags and edge properties, full text, "
        "record vectors, window vectors) merged 40:35:20:5 into one ranked, paged list.",
    )

    @app.get("/find", response_model=FindPage, summary="Answer a question with the four lookups")
    def find(
        q: Annotated[str, Query(min_length=1, max_length=10_000, description="the question")],
        page: Annotated[int, Query(ge=1, description="page number, from 1")] = 1,
        page_size: Annotated[int, Query(ge=1, le=1000)] = 30,
    ) -> FindPage:
        return client.find(q, page, page_size)

    @app.get("/timeline", response_model=list[RecordSummary], summary="Records by date between two times")
    def timeline(
        from_time: Annotated[datetime, Query(alias="from", description="ISO 8601, inclusive; UTC without a zone")],
        to_time: Annotated[datetime, Query(alias="to", description="ISO 8601, inclusive; UTC without a zone")],
        page: Annotated[int, Query(ge=1)] = 1,
        page_size: Annotated[int, Query(ge=1, le=1000)] = 30,
        kind: Annotated[list[str] | None, Query(description="only these kinds (repeatable)")] = None,
        tag: Annotated[list[str] | None, Query(description="only records with all these tags (repeatable)")] = None,
    ) -> list[RecordSummary]:
        return client.timeline(assume_utc(from_time), assume_utc(to_time), page, page_size, kind, tag)

    @app.get("/health", response_model=Health, summary="ok, or degraded with reasons (find still answers)")
    def health() -> Health:
        return client.health()

    @app.exception_handler(psycopg.Error)
    def database_error(_: Request, error: psycopg.Error) -> JSONResponse:
        return JSONResponse(status_code=status_of(error), content=error_body(error))

    return app


def status_of(error: psycopg.Error) -> int:
    if isinstance(error, psycopg.OperationalError):  # psycopg_pool's PoolTimeout is one too
        return 503
    return STATUS_OF_SQLSTATE.get(error.sqlstate or "", 500)


def error_body(error: psycopg.Error) -> dict[str, Any]:
    if status_of(error) == 500:
        return {"detail": "internal database error", "sqlstate": error.sqlstate}
    return {
        "detail": error.diag.message_primary or str(error).strip(),
        "hint": error.diag.message_hint,
        "sqlstate": error.sqlstate,
    }


def serve(conninfo: str, gateway: Gateway, host: str, port: int) -> None:
    """Runs the service with uvicorn until interrupted, on a pool of connections to `conninfo`."""
    with ConnectionPool(conninfo, min_size=1, max_size=8, kwargs={"autocommit": True}, open=True) as pool:
        try:
            pool.wait(timeout=POOL_WAIT_SECONDS)
        except PoolTimeout:
            raise psycopg.OperationalError(
                f"cannot connect to PostgreSQL within {POOL_WAIT_SECONDS:.0f} seconds: pass --dsn, or set EMEM_DSN "
                "or libpq's PG* variables"
            ) from None
        uvicorn.run(create_app(Client(pool, gateway)), host=host, port=port)
