"""emem's find as a LangChain retriever (the `langchain` extra: `pip install '/path/to/emem[langchain]'`).

    retriever = EmemRetriever(client=Client(pool), k=10)
    documents = retriever.invoke("Which invoices did Kowalski send?")
    documents = retriever.invoke("...", k=3, filter={"lane": "sales", "tags": ["invoice"]})
    documents = await EmemRetriever(client=AsyncClient(pool), search_kwargs={"k": 5}).ainvoke("...", page=2)

Documents come in find's order; see EmemRetriever for their metadata.
"""

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from emem_client.integrations import EmemClient, Search, afind_rows, find_rows, row_metadata
from emem_client.service import MAX_PAGE, MAX_PAGE_SIZE
from emem_client.types import FindPage, FindRow


class EmemRetriever(BaseRetriever):
    """The first `k` records of emem's merged list as Documents, in rank order; each Document's id is the
    record id and its metadata says rank, lane, kind, tags, distance and distance_kind, placed_by, found_by and
    windows, plus the page's totals and whether it was degraded.

    As LangChain's vector-store retrievers: `k` (records per page, find's page size), `search_kwargs`
    (`k`, `page`, `filter`) and, per call, `invoke(question, k=3, page=2, filter={...})`. A filter keeps
    records of the given `lane` and `kind` (a text or a list) that carry all its `tags`, reading find's
    pages until k such records or FILTER_PAGES pages. Ranking stays in the database."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, populate_by_name=True)

    client: EmemClient
    k: int = Field(default=30, ge=1, le=MAX_PAGE_SIZE, alias="page_size", description="Records to return")
    page: int = Field(default=1, ge=1, le=MAX_PAGE, description="Page number, from 1")
    search_kwargs: dict[str, Any] = Field(default_factory=dict, description="k, page, filter for every call")

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        return documents(*find_rows(self.client, query, self._search(options)))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        return documents(*(await afind_rows(self.client, query, self._search(options))))

    def _search(self, options: dict[str, Any]) -> Search:
        """This call's options over the retriever's search_kwargs, over its k and page."""
        return Search.of({"k": self.k, "page": self.page, **self.search_kwargs}, options)


def documents(page: FindPage, rows: list[FindRow]) -> list[Document]:
    return [Document(id=str(row.record_id), page_content=row.content, metadata=row_metadata(page, row)) for row in rows]
