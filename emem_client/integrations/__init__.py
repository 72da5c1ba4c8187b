"""Retrievers for agent frameworks over find, each record's provenance kept in its metadata.

    from emem_client.integrations.langchain import EmemRetriever    # the langchain extra
    from emem_client.integrations.llamaindex import EmemRetriever   # the llamaindex extra

Both take a Client (sync calls; async calls run it in a worker thread) or an AsyncClient (async
calls only), how many records to return (`k`, find's page size) and which page, and an optional
filter on lane, kind and tags (find itself has none, and no date bounds: the timeline has). This
package imports neither framework: each module imports its own, so the client installs and
imports without them.
"""

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from emem_client.aio import AsyncClient
from emem_client.client import Client
from emem_client.service import MAX_PAGE, MAX_PAGE_SIZE
from emem_client.types import FindPage, FindRow

EmemClient = Client | AsyncClient
# How many pages of find a filter reads at most to fill its k records (it reads no further: a
# filter that matches little returns fewer).
FILTER_PAGES = 10
FILTER_KEYS = ("lane", "kind", "tags")


def checked_client(client: Any) -> EmemClient:
    if not isinstance(client, Client | AsyncClient):
        raise TypeError(f"client must be an emem_client Client or AsyncClient, got {type(client).__name__}")
    return client


def checked_paging(page: Any, k: Any) -> tuple[int, int]:
    """The page and k (find's page size) when both are integers in find's ranges."""
    for name, value, high in (("page", page, MAX_PAGE), ("k", k, MAX_PAGE_SIZE)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise ValueError(f"{name} must be an integer from 1 to {high}, got {value!r}")
    return page, k


@dataclass(frozen=True)
class RowFilter:
    """Which of find's rows to keep: lanes and kinds (any of them), tags (all of them)."""

    lanes: frozenset[str] | None = None
    kinds: frozenset[str] | None = None
    tags: frozenset[str] = frozenset()

    @classmethod
    def of(cls, given: Mapping[str, Any] | None) -> "RowFilter | None":
        """The filter of `{"lane": ..., "kind": ..., "tags": [...]}` (each a text or a list of texts)."""
        if not given:
            return None
        if not isinstance(given, Mapping) or set(given) - set(FILTER_KEYS):
            unknown = sorted(set(given) - set(FILTER_KEYS)) if isinstance(given, Mapping) else given
            raise ValueError(f"filter: unknown keys {unknown}; accepted: {', '.join(FILTER_KEYS)}")
        lanes, kinds, tags = (texts(given.get(key), key) for key in FILTER_KEYS)
        return cls(lanes, kinds, tags or frozenset())

    def keeps(self, row: FindRow) -> bool:
        return (
            (self.lanes is None or row.lane in self.lanes)
            and (self.kinds is None or row.kind in self.kinds)
            and self.tags <= set(row.tags)
        )


def texts(value: Any, key: str) -> frozenset[str] | None:
    if value is None:
        return None
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list | tuple | set | frozenset) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"filter: {key} must be a text or a list of texts, got {value!r}")
    return frozenset(values)


@dataclass(frozen=True)
class Search:
    """One call's options: the retriever's, overridden by the call's own (and its search_kwargs)."""

    page: int
    k: int
    filter: RowFilter | None

    @classmethod
    def of(cls, defaults: Mapping[str, Any], call: Mapping[str, Any]) -> "Search":
        options = {**defaults, **(call.get("search_kwargs") or {}), **{k: v for k, v in call.items() if v is not None}}
        options.pop("search_kwargs", None)
        unknown = set(options) - {"page", "k", "filter"}
        if unknown:
            raise ValueError(f"unknown search options {sorted(unknown)}; accepted: k, page, filter (lane, kind, tags)")
        page, k = checked_paging(options.get("page", 1), options.get("k", 30))
        return cls(page, k, RowFilter.of(options.get("filter")))


def filtered(search: Search, pages: list[FindPage]) -> tuple[FindPage, list[FindRow]]:
    """The first page and the rows to return: without a filter, the page's; with one, the first k rows
    of find's list that it keeps, from the pages read."""
    rows = [row for page in pages for row in page.rows if search.filter is None or search.filter.keeps(row)]
    return pages[0], rows[: search.k]


def pages_to_read(search: Search) -> range:
    return range(search.page, search.page + (FILTER_PAGES if search.filter else 1))


def find_rows(client: EmemClient, question: str, search: Search) -> tuple[FindPage, list[FindRow]]:
    """The rows for a synchronous caller; an AsyncClient cannot serve one."""
    if isinstance(client, AsyncClient):
        raise TypeError("this retriever holds an AsyncClient: call it asynchronously, or give it a Client")
    return walk(lambda page: client.find(question, page, search.k), search)


async def afind_rows(client: EmemClient, question: str, search: Search) -> tuple[FindPage, list[FindRow]]:
    """The rows for an asynchronous caller: a Client runs in a worker thread."""
    if isinstance(client, AsyncClient):
        return await awalk(lambda page: client.find(question, page, search.k), search)
    return await asyncio.to_thread(find_rows, client, question, search)


def walk(find: Callable[[int], FindPage], search: Search) -> tuple[FindPage, list[FindRow]]:
    pages: list[FindPage] = []
    for number in pages_to_read(search):
        pages.append(find(number))
        if enough(search, pages):
            break
    return filtered(search, pages)


async def awalk(find: Callable[[int], Awaitable[FindPage]], search: Search) -> tuple[FindPage, list[FindRow]]:
    pages: list[FindPage] = []
    for number in pages_to_read(search):
        pages.append(await find(number))
        if enough(search, pages):
            break
    return filtered(search, pages)


def enough(search: Search, pages: list[FindPage]) -> bool:
    """Whether the pages read hold k kept rows, or find's list ends."""
    return len(filtered(search, pages)[1]) >= search.k or pages[-1].page >= pages[-1].total_pages


def provenance(row: FindRow) -> str:
    """The short line a framework may show a language model beside the content."""
    return f"emem record {row.record_id} ({row.kind}, lane {row.lane}, rank {row.rank})"


def row_metadata(page: FindPage, row: FindRow) -> dict[str, Any]:
    """Where a row comes from (as find says it) and the page it belongs to."""
    return {
        "source": provenance(row),
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
