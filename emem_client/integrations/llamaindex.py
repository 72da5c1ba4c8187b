"""emem's find as a LlamaIndex retriever (the `llamaindex` extra: `pip install '/path/to/emem[llamaindex]'`).

    retriever = EmemRetriever(Client(pool), similarity_top_k=10)
    nodes = retriever.retrieve("Which invoices did Kowalski send?")
    nodes = await EmemRetriever(AsyncClient(pool), filters={"lane": "sales"}).aretrieve("...")

Nodes come in find's order; see EmemRetriever for their metadata and score.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from emem_client.integrations import EmemClient, Search, afind_rows, checked_client, find_rows, row_metadata
from emem_client.types import FindPage, FindRow

# What a node shows the language model and the embedding model beside its content: one short line.
SHOWN_METADATA = ("source",)


class EmemRetriever(BaseRetriever):
    """The first `similarity_top_k` records of emem's merged list as nodes, in rank order; each node's id is the
    record id and its metadata says rank, lane, kind, tags, distance and distance_kind, placed_by, found_by and
    windows, plus the page's totals and whether it was degraded, and `source`, a short provenance line.

    Only the keys of `shown_metadata` (default: `source`) reach the LLM's prompt and the embed text; the rest
    stays on the node for code. The score is the cosine similarity (1 - distance) where the distance is a cosine
    distance; a placeholder distance (degraded, or a record without a vector) scores 1 / rank, so the nodes keep
    find's order and stock postprocessors work: SimilarityPostprocessor(similarity_cutoff=c) keeps those ranks
    up to 1/c. `filters` as the LangChain retriever's filter: lane, kind (a text or a list), tags (all)."""

    def __init__(
        self,
        client: EmemClient,
        similarity_top_k: int = 30,
        page: int = 1,
        filters: Mapping[str, Any] | None = None,
        shown_metadata: Sequence[str] = SHOWN_METADATA,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.client = checked_client(client)
        self.options = {"k": similarity_top_k, "page": page, "filter": dict(filters) if filters else None}
        self.search = Search.of(self.options, {})  # checked now, not at the first call
        if isinstance(shown_metadata, str) or not all(isinstance(key, str) for key in shown_metadata):
            raise ValueError(f"shown_metadata must be a list of metadata keys, got {shown_metadata!r}")
        self.shown_metadata = tuple(shown_metadata)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.nodes(*find_rows(self.client, query_bundle.query_str, self.search))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.nodes(*(await afind_rows(self.client, query_bundle.query_str, self.search)))

    def nodes(self, page: FindPage, rows: list[FindRow]) -> list[NodeWithScore]:
        return [NodeWithScore(node=self.node(page, row), score=score(row)) for row in rows]

    def node(self, page: FindPage, row: FindRow) -> TextNode:
        metadata = row_metadata(page, row)
        hidden = [key for key in metadata if key not in self.shown_metadata]
        return TextNode(
            id_=str(row.record_id),
            text=row.content,
            metadata=metadata,
            excluded_llm_metadata_keys=hidden,
            excluded_embed_metadata_keys=hidden,
        )


def score(row: FindRow) -> float:
    """Cosine similarity where there is one; 1 / rank for a placeholder distance (find's order, never None)."""
    return 1.0 - row.distance if row.distance_kind == "cosine" else 1.0 / row.rank
