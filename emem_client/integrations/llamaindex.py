"""emem's find as a LlamaIndex retriever (`pip install 'emem-client[llamaindex]'`).

    retriever = EmemRetriever(Client(connection))
    nodes = retriever.retrieve("Which invoices did Kowalski send?")
    nodes = await EmemRetriever(AsyncClient(connection), page_size=10).aretrieve("...")

Nodes come in find's order; see EmemRetriever for their metadata and score.
"""

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from emem_client.integrations import EmemClient, afind_page, checked_client, checked_paging, find_page, row_metadata
from emem_client.types import FindPage, FindRow


class EmemRetriever(BaseRetriever):
    """One page of emem's merged list as nodes, in rank order; each node's id is the record id and its metadata
    says rank, lane, kind, tags, distance and distance_kind, placed_by, found_by and windows, plus the page's
    totals and whether it was degraded. The score is the cosine similarity (1 - distance) when the distance is a
    cosine distance, and None when it is a placeholder (no vector to compare): the order is find's, not the
    score's."""

    def __init__(
        self,
        client: EmemClient,
        page: int = 1,
        page_size: int = 30,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.client = checked_client(client)
        self.page, self.page_size = checked_paging(page, page_size)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes(find_page(self.client, query_bundle.query_str, self.page, self.page_size))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes(await afind_page(self.client, query_bundle.query_str, self.page, self.page_size))


def nodes(page: FindPage) -> list[NodeWithScore]:
    return [
        NodeWithScore(
            node=TextNode(id_=str(row.record_id), text=row.content, metadata=row_metadata(page, row)),
            score=similarity(row),
        )
        for row in page.rows
    ]


def similarity(row: FindRow) -> float | None:
    return 1.0 - row.distance if row.distance_kind == "cosine" else None
