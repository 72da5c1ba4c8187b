"""emem's find as a LangChain retriever (`pip install 'emem-client[langchain]'`).

    retriever = EmemRetriever(client=Client(connection))
    documents = retriever.invoke("Which invoices did Kowalski send?")
    documents = await EmemRetriever(client=AsyncClient(connection), page_size=10).ainvoke("...", page=2)

Documents come in find's order; see EmemRetriever for their metadata.
"""

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field

from emem_client.integrations import EmemClient, afind_page, find_page, row_metadata
from emem_client.types import FindPage


class EmemRetriever(BaseRetriever):
    """One page of emem's merged list as Documents, in rank order; each Document's id is the record id and its
    metadata says rank, lane, kind, tags, distance and distance_kind, placed_by, found_by and windows, plus the
    page's totals and whether it was degraded. `page` and `page_size` may also be given per call
    (`invoke(question, page=2)`). Ranking stays in the database: records are in the order find placed them."""

    client: EmemClient
    page: int = Field(default=1, ge=1, description="Page number, from 1")
    page_size: int = Field(default=30, ge=1, description="Records per page, from 1")

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        page: int | None = None,
        page_size: int | None = None,
    ) -> list[Document]:
        return documents(find_page(self.client, query, *self._paging(page, page_size)))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        page: int | None = None,
        page_size: int | None = None,
    ) -> list[Document]:
        return documents(await afind_page(self.client, query, *self._paging(page, page_size)))

    def _paging(self, page: int | None, page_size: int | None) -> tuple[int, int]:
        """This call's page and page size: those given, else the retriever's."""
        return (self.page if page is None else page, self.page_size if page_size is None else page_size)


def documents(page: FindPage) -> list[Document]:
    return [
        Document(id=str(row.record_id), page_content=row.content, metadata=row_metadata(page, row)) for row in page.rows
    ]
