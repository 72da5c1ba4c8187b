"""The LangChain and LlamaIndex retrievers, called through each library's own interface
(invoke/ainvoke, retrieve/aretrieve) against the real database.

Vectors are the hand-made ones of tests/client/test_client.py (StubGateway), so every distance can be
worked out by hand; one test uses the embedded model, where meaning is the point.
"""

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from doubles import DAY, INVOICE_AXIS, MEETING_AXIS, WEATHER_AXIS, StubGateway
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore
from pydantic import ValidationError

from emem_client import GATEWAY_DOWN, AsyncClient, Client, EmbeddedGateway, GatewayError
from emem_client.integrations import langchain, llamaindex

WEATHER = "How was the weather?"
PROVENANCE = {
    "source",
    "record_id",
    "rank",
    "lane",
    "kind",
    "tags",
    "distance",
    "distance_kind",
    "placed_by",
    "found_by",
}
PAGE_KEYS = {"windows", "page", "total_pages", "total_candidates", "degraded", "degraded_reason", "totals_exact"}


def langchain_retriever(**fields: Any) -> langchain.EmemRetriever:
    """langchain.EmemRetriever(**fields), for fields its signature for type checkers leaves out: k by its name
    (the signature has only its alias, page_size) and the wrong ones a test passes on purpose."""
    return langchain.EmemRetriever(**fields)


@pytest.fixture
def gateway() -> StubGateway:
    return StubGateway({WEATHER: WEATHER_AXIS, "Which invoices did Kowalski send?": INVOICE_AXIS})


@pytest.fixture
def client(db: psycopg.Connection, gateway: StubGateway) -> Client:
    db.execute("select emem.create_lane('work'), emem.create_lane('private')")
    client = Client(db, gateway)
    client.ensure_space()
    return client


@pytest.fixture
def corpus(client: Client) -> dict[str, int]:
    """Four notes in two lanes; the weather ones nearest the weather question, in this order."""
    notes = [
        ("weather", "Sunny all week", "work", ["weather"], WEATHER_AXIS),
        ("rain", "Rain expected on Friday", "work", ["weather"], [0.2, 1.0, 0.0]),
        ("invoice", "Kowalski sent invoice INV-2031", "work", ["invoice"], INVOICE_AXIS),
        ("meeting", "Weekly sync moved to Tuesday, weather permitting", "private", ["meeting"], MEETING_AXIS),
    ]
    items = [
        {"kind": "note", "content": content, "lane": lane, "tags": tags, "vector": vector, "occurred_at": DAY}
        for _, content, lane, tags, vector in notes
    ]
    return dict(zip([name for name, *_ in notes], client.put_records(items), strict=True))


def run_async(scenario: Callable[[psycopg.AsyncConnection[Any]], Any], conninfo: str) -> Any:
    async def main() -> Any:
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as connection:
            return await scenario(connection)

    return asyncio.run(main())


# ---- LangChain ----------------------------------------------------------------------------------


def test_langchain_invoke_gives_documents_in_rank_order_with_provenance(client: Client, corpus: dict[str, int]) -> None:
    documents = langchain.EmemRetriever(client=client).invoke(WEATHER)
    assert all(isinstance(document, Document) for document in documents)
    assert [document.metadata["rank"] for document in documents] == list(range(1, len(documents) + 1))
    first = documents[0]
    assert (first.id, first.page_content) == (str(corpus["weather"]), "Sunny all week")
    assert set(first.metadata) == PROVENANCE | PAGE_KEYS
    assert first.metadata | {"distance": 0.0} == {
        "source": f"emem record {corpus['weather']} (note, lane work, rank 1)",
        "record_id": corpus["weather"],
        "rank": 1,
        "lane": "work",
        "kind": "note",
        "tags": ["weather"],
        "distance": 0.0,
        "distance_kind": "cosine",
        "placed_by": "record_vectors",
        "found_by": ["record_vectors", "tags"],
        "windows": [],
        "page": 1,
        "total_pages": 1,
        "total_candidates": 4,
        "degraded": False,
        "degraded_reason": None,
        "totals_exact": True,
    }
    assert first.metadata["distance"] == pytest.approx(0.0, abs=1e-6)


def test_langchain_page_and_page_size_on_the_retriever_and_per_call(client: Client, corpus: dict[str, int]) -> None:
    retriever = langchain.EmemRetriever(client=client, page_size=2)
    assert [document.metadata["rank"] for document in retriever.invoke(WEATHER)] == [1, 2]
    second = retriever.invoke(WEATHER, page=2)
    assert [(document.metadata["rank"], document.metadata["page"]) for document in second] == [(3, 2), (4, 2)]
    assert [document.metadata["rank"] for document in retriever.invoke(WEATHER, page=2, k=3)] == [4]
    assert retriever.batch([WEATHER, WEATHER], config={"max_concurrency": 1})[1][0].id == str(corpus["weather"])


def test_langchain_ainvoke_with_an_async_client_and_with_a_client(
    client: Client, gateway: StubGateway, corpus: dict[str, int], dsn: Callable[..., str]
) -> None:
    async def scenario(connection: psycopg.AsyncConnection[Any]) -> tuple[list[Document], list[Document]]:
        native = await langchain.EmemRetriever(client=AsyncClient(connection, gateway)).ainvoke(WEATHER, k=1)
        threaded = await langchain.EmemRetriever(client=client, page_size=1).ainvoke(WEATHER, page=2)
        return native, threaded

    native, threaded = run_async(scenario, dsn())
    assert [document.id for document in native] == [str(corpus["weather"])]
    assert [document.metadata["rank"] for document in threaded] == [2]


def test_langchain_in_a_chain(client: Client, corpus: dict[str, int]) -> None:
    def record_ids(documents: list[Document]) -> list[int]:
        return [document.metadata["record_id"] for document in documents]

    chain = langchain.EmemRetriever(client=client, page_size=2) | RunnableLambda(record_ids)
    assert chain.invoke(WEATHER) == [corpus["weather"], corpus["rain"]]


def test_langchain_refuses_bad_arguments_with_what_is_accepted(
    client: Client, gateway: StubGateway, corpus: dict[str, int], dsn: Callable[..., str]
) -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        langchain.EmemRetriever(client=client, page=0)
    with pytest.raises(ValidationError, match="Input should be an instance of Client"):
        langchain_retriever(client=client.source)
    with pytest.raises(ValidationError, match="less than or equal to 1000"):
        langchain_retriever(client=client, k=5000)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        langchain_retriever(client=client, top_k=3)
    retriever = langchain.EmemRetriever(client=client)
    with pytest.raises(ValueError, match="k must be an integer from 1 to 1000, got 0"):
        retriever.invoke(WEATHER, k=0)
    with pytest.raises(ValueError, match=r"unknown search options \['top_k'\]; accepted: k, page, filter"):
        retriever.invoke(WEATHER, top_k=4)
    with pytest.raises(ValueError, match=r"filter: unknown keys \['occurred_after'\]; accepted: lane, kind, tags"):
        retriever.invoke(WEATHER, filter={"occurred_after": "2024-01-01"})

    async def sync_call_of_an_async_client(connection: psycopg.AsyncConnection[Any]) -> None:
        langchain.EmemRetriever(client=AsyncClient(connection, gateway)).invoke(WEATHER)

    with pytest.raises(TypeError, match="holds an AsyncClient: call it asynchronously, or give it a Client"):
        run_async(sync_call_of_an_async_client, dsn())


# ---- LlamaIndex ---------------------------------------------------------------------------------


def test_llamaindex_retrieve_gives_scored_nodes_in_rank_order_with_provenance(
    client: Client, corpus: dict[str, int]
) -> None:
    nodes = llamaindex.EmemRetriever(client, similarity_top_k=2).retrieve(WEATHER)
    assert all(isinstance(node, NodeWithScore) for node in nodes)
    assert [node.node_id for node in nodes] == [str(corpus["weather"]), str(corpus["rain"])]
    assert [node.metadata["rank"] for node in nodes] == [1, 2]
    assert nodes[0].score == pytest.approx(1.0) and nodes[1].score == pytest.approx(1 - nodes[1].metadata["distance"])
    assert nodes[0].node.get_content() == "Sunny all week"
    assert set(nodes[0].metadata) == PROVENANCE | PAGE_KEYS
    assert (nodes[0].metadata["lane"], nodes[0].metadata["found_by"]) == ("work", ["record_vectors", "tags"])
    second = llamaindex.EmemRetriever(client, page=2, similarity_top_k=2).retrieve(WEATHER)
    assert [node.metadata["rank"] for node in second] == [3, 4]


def test_llamaindex_aretrieve_with_an_async_client_and_with_a_client(
    client: Client, gateway: StubGateway, corpus: dict[str, int], dsn: Callable[..., str]
) -> None:
    async def scenario(connection: psycopg.AsyncConnection[Any]) -> tuple[list[NodeWithScore], ...]:
        native = await llamaindex.EmemRetriever(AsyncClient(connection, gateway), similarity_top_k=1).aretrieve(WEATHER)
        threaded = await llamaindex.EmemRetriever(client, page=2, similarity_top_k=1).aretrieve(WEATHER)
        return native, threaded

    native, threaded = run_async(scenario, dsn())
    assert [node.node_id for node in native] == [str(corpus["weather"])]
    assert [node.metadata["rank"] for node in threaded] == [2]


def test_llamaindex_degraded_rows_score_by_rank_and_stock_postprocessors_keep_them(
    client: Client, gateway: StubGateway, corpus: dict[str, int]
) -> None:
    gateway.failure = GatewayError(GATEWAY_DOWN, "switched off by the test")
    nodes = llamaindex.EmemRetriever(client).retrieve("Which invoices did Kowalski send?")
    assert [node.node_id for node in nodes] == [str(corpus["invoice"])]
    assert nodes[0].score == 1.0  # 1 / rank
    assert SimilarityPostprocessor(similarity_cutoff=0.3).postprocess_nodes(nodes) == nodes
    metadata = nodes[0].metadata
    assert (metadata["degraded"], metadata["degraded_reason"], metadata["distance_kind"]) == (
        True,
        "gateway_down",
        "placeholder",
    )


def test_llamaindex_refuses_bad_arguments_with_what_is_accepted(
    client: Client, gateway: StubGateway, corpus: dict[str, int], dsn: Callable[..., str]
) -> None:
    with pytest.raises(ValueError, match="page must be an integer from 1 to 100000, got 0"):
        llamaindex.EmemRetriever(client, page=0)
    with pytest.raises(ValueError, match="k must be an integer from 1 to 1000, got '10'"):
        llamaindex.EmemRetriever(client, similarity_top_k="10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="client must be an emem_client Client or AsyncClient, got str"):
        llamaindex.EmemRetriever("postgresql://")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be an integer from 1 to 1000, got 5000"):
        llamaindex.EmemRetriever(client, similarity_top_k=5000)

    async def sync_call_of_an_async_client(connection: psycopg.AsyncConnection[Any]) -> None:
        llamaindex.EmemRetriever(AsyncClient(connection, gateway)).retrieve(WEATHER)

    with pytest.raises(TypeError, match="holds an AsyncClient"):
        run_async(sync_call_of_an_async_client, dsn())


# ---- both -----------------------------------------------------------------------------------------


def test_retrievers_read_only_the_lanes_of_the_role(
    db: psycopg.Connection,
    make_role: Callable[..., str],
    dsn: Callable[..., str],
    gateway: StubGateway,
    corpus: dict[str, int],
) -> None:
    db.execute("select emem.create_agent_profile('worker', array['work'])")
    with psycopg.connect(dsn(make_role("worker", "worker")), autocommit=True) as connection:
        worker = Client(connection, gateway)
        documents = langchain.EmemRetriever(client=worker).invoke(WEATHER)
        nodes = llamaindex.EmemRetriever(worker).retrieve(WEATHER)
    assert {document.metadata["lane"] for document in documents} == {"work"}
    assert [node.node_id for node in nodes] == [document.id for document in documents]
    assert str(corpus["meeting"]) not in {document.id for document in documents}
    assert documents[0].metadata["total_candidates"] == 4  # the page rule: totals count every lane


def test_retrievers_with_the_embedded_model_find_by_meaning(db: psycopg.Connection) -> None:
    """The one retriever test with the real all-MiniLM-L6-v2: a paraphrase shares no word with its answer."""
    db.execute("select emem.create_lane('work')")
    client = Client(db, EmbeddedGateway())
    client.ensure_space()
    contents = [
        "The quarterly tax filing must reach the revenue office before April 15.",
        "Our cat sleeps on the warm windowsill every afternoon.",
        "The replica database lags behind the primary during nightly backups.",
    ]
    vectors = client.embed(contents)
    ids = client.put_records(
        [{"kind": "note", "content": c, "lane": "work", "vector": v} for c, v in zip(contents, vectors, strict=True)]
    )
    question = "When is the deadline for sending the government our taxes?"
    [document] = langchain.EmemRetriever(client=client, page_size=1).invoke(question)
    [node] = llamaindex.EmemRetriever(client, similarity_top_k=1).retrieve(question)
    assert document.id == node.node_id == str(ids[0])
    assert document.metadata["distance_kind"] == "cosine" and node.score is not None and node.score > 0.3


def test_importing_the_client_loads_no_framework_and_no_mcp() -> None:
    probe = (
        "import sys, emem_client, emem_client.integrations, emem_client.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'langchain_core', 'llama_index', 'starlette'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=os.environ)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


# ---- the frameworks' own conventions ------------------------------------------------------------------


def test_langchain_k_on_the_retriever_in_search_kwargs_and_per_call(client: Client, corpus: dict[str, int]) -> None:
    assert len(langchain_retriever(client=client, k=2).invoke(WEATHER)) == 2
    assert len(langchain.EmemRetriever(client=client, search_kwargs={"k": 1}).invoke(WEATHER)) == 1
    retriever = langchain.EmemRetriever(client=client)
    assert len(retriever.invoke(WEATHER, k=3)) == 3
    assert [d.metadata["rank"] for d in retriever.invoke(WEATHER, search_kwargs={"k": 1, "page": 2})] == [2]


def test_langchain_filter_by_lane_kind_and_tags_reads_further_pages_for_k_records(
    client: Client, corpus: dict[str, int]
) -> None:
    retriever = langchain_retriever(client=client, k=1)
    [invoice] = retriever.invoke(WEATHER, filter={"tags": ["invoice"]})  # rank 3 of find's list: page 3 of k=1
    assert (invoice.id, invoice.metadata["rank"]) == (str(corpus["invoice"]), 3)
    assert [d.id for d in retriever.invoke(WEATHER, k=4, filter={"lane": "private"})] == [str(corpus["meeting"])]
    assert retriever.invoke(WEATHER, filter={"kind": ["entity", "file"]}) == []


def test_llamaindex_shows_the_llm_and_the_embedder_the_content_and_one_provenance_line(
    client: Client, corpus: dict[str, int]
) -> None:
    [node] = llamaindex.EmemRetriever(client, similarity_top_k=1).retrieve(WEATHER)
    provenance = f"source: emem record {corpus['weather']} (note, lane work, rank 1)"
    for mode in (MetadataMode.LLM, MetadataMode.EMBED):
        assert node.node.get_content(metadata_mode=mode) == f"{provenance}\n\nSunny all week"
    assert node.metadata["found_by"] == ["record_vectors", "tags"]  # still there for code
    [node] = llamaindex.EmemRetriever(client, similarity_top_k=1, shown_metadata=["lane", "rank"]).retrieve(WEATHER)
    assert node.node.get_content(metadata_mode=MetadataMode.LLM) == "rank: 1\nlane: work\n\nSunny all week"


def test_llamaindex_filters(client: Client, corpus: dict[str, int]) -> None:
    nodes = llamaindex.EmemRetriever(client, similarity_top_k=2, filters={"tags": ["weather"]}).retrieve(WEATHER)
    assert [node.node_id for node in nodes] == [str(corpus["weather"]), str(corpus["rain"])]
