"""Retrievers for agent frameworks over find, each record's provenance kept in its metadata.

    from emem_client.integrations.langchain import EmemRetriever    # pip install 'emem-client[langchain]'
    from emem_client.integrations.llamaindex import EmemRetriever   # pip install 'emem-client[llamaindex]'

Both take a Client (sync calls; async calls run it in a worker thread) or an AsyncClient (async
calls only), and a page and page size. This package imports neither framework: each module
imports its own, so the client installs and imports without them.
"""

import asyncio
from typing import Any

from emem_client.aio import AsyncClient
from emem_client.client import Client
from emem_client.types import FindPage, FindRow

EmemClient = Client | AsyncClient


def checked_client(client: Any) -> EmemClient:
    if not isinstance(client, Client | AsyncClient):
        raise TypeError(f"client must be an emem_client Client or AsyncClient, got {type(client).__name__}")
    return client


def checked_paging(page: Any, page_size: Any) -> tuple[int, int]:
    """The page and page size when both are integers from 1 (the database checks the upper bounds)."""
    for name, value in (("page", page), ("page_size", page_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer from 1, got {value!r}")
    return page, page_size


def find_page(client: EmemClient, question: str, page: int, page_size: int) -> FindPage:
    """One page of find for a synchronous caller; an AsyncClient cannot serve one."""
    if isinstance(client, AsyncClient):
        raise TypeError("this retriever holds an AsyncClient: call it asynchronously, or give it a Client")
    return client.find(question, *checked_paging(page, page_size))


async def afind_page(client: EmemClient, question: str, page: int, page_size: int) -> FindPage:
    """One page of find for an asynchronous caller: a Client runs in a worker thread."""
    paging = checked_paging(page, page_size)
    if isinstance(client, AsyncClient):
        return await client.find(question, *paging)
    return await asyncio.to_thread(client.find, question, *paging)


def row_metadata(page: FindPage, row: FindRow) -> dict[str, Any]:
    """Where a row comes from (as find says it) and the page it belongs to."""
    return {
        "record_id": row.record_id,
        "rank": row.rank,
        "lane": row.lane,
        "kind": row.kind,
        "tags": list(row.tags),
        "distance": row.distance,
        "distance_kind": row.distance_kind,
        "placed_by": row.placed_by,
        "found_by": list(row.found_by),
        "windows": list(row.windows),
        "page": page.page,
        "total_pages": page.total_pages,
        "total_candidates": page.total_candidates,
        "totals_exact": page.totals_exact,
        "degraded": page.degraded,
        "degraded_reason": page.degraded_reason,
    }
