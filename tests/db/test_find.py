"""e_gather_find, behaviour by behaviour of the design, on a small corpus with hand-made vectors."""

import json
import math
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import writes
from databases import MakeRole
from finds import envelope
from psycopg import errors
from queries import scalar
from vectors import unit

QUESTION_VECTOR = "[1,0,0,0]"
LETTER = {"record_vectors": "V", "tags": "T", "window_vectors": "W", "fulltext": "F"}


def lanes(db: psycopg.Connection, make_role: MakeRole) -> None:
    """Lanes sales and hr, and a space of 4 dimensions."""
    db.execute("select emem.create_lane('sales'), emem.create_lane('hr')")
    db.execute("select emem.create_embedding_space('hand-made', 4, null, true)")


# Each test writes its records into a clone of the lanes, but for those reading the four lists.
pytestmark = pytest.mark.corpus(lanes, read_only=False)


@pytest.fixture
def corpus(db: psycopg.Connection) -> psycopg.Connection:
    return db


def put(db: psycopg.Connection, items: list[dict[str, Any]]) -> list[int]:
    return writes.put(db, items, lane="sales")


def disjoint_lists(db: psycopg.Connection, make_role: MakeRole) -> dict[str, list[int]]:
    """20 records for each lookup, each found by exactly one lookup of 'apollo INV-2031' (with the
    nearest 20 record vectors)."""
    lanes(db, make_role)
    lists = {
        "record_vectors": put(
            db, [{"content": f"vector record {i}", "vector": unit(1, 0.01 * i, 0, 0)} for i in range(20)]
        ),
        "tags": put(db, [{"content": f"tagged record {i}", "tags": ["apollo"]} for i in range(20)]),
        "fulltext": put(db, [{"content": f"INV-2031 mentioned {i}"} for i in range(20)]),
    }
    turns = put(
        db,
        [{"kind": "conversation", "content": f"turn {i}", "thread_id": "c", "thread_position": i} for i in range(20)],
    )
    for i, turn in enumerate(turns):
        db.execute("select emem.put_window(%s, %s::vector)", ([turn], str(unit(1, 0, 0.01 * i, 0))))
    lists["window_vectors"] = turns
    # Filler that no lookup finds: vectors pointing away from the question.
    put(db, [{"content": f"unrelated {i}", "vector": unit(0, 0, 0, 1)} for i in range(30)])
    return lists


FOUR_LISTS = pytest.mark.corpus(disjoint_lists, read_only=True)


@pytest.fixture
def four_disjoint_lists(db: psycopg.Connection, built: dict[str, list[int]]) -> dict[str, list[int]]:
    db.execute("set emem.record_vector_candidates = 20")
    return built


def placed_letters(found: dict[str, Any]) -> str:
    return "".join(LETTER[row["placed_by"]] for row in found["rows"])


@FOUR_LISTS
def test_four_lookups_interleave_40_35_20_5(four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection) -> None:
    found = envelope(db, "apollo INV-2031", QUESTION_VECTOR, page_size=11)
    assert placed_letters(found) == "VTWVTVTWVTF"
    for row in found["rows"]:
        assert row["record_id"] in four_disjoint_lists[row["placed_by"]]
        assert row["found_by"] == [row["placed_by"]]


@FOUR_LISTS
def test_every_candidate_is_kept_and_pages_are_cut_from_the_merged_list(
    four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection
) -> None:
    whole = envelope(db, "apollo INV-2031", QUESTION_VECTOR, page_size=1000)
    assert whole["total_candidates"] == 80
    every_candidate = [record_id for ids in four_disjoint_lists.values() for record_id in ids]
    assert sorted(r["record_id"] for r in whole["rows"]) == sorted(every_candidate)
    pages = [envelope(db, "apollo INV-2031", QUESTION_VECTOR, page=p, page_size=7) for p in range(1, 13)]
    assert pages[0]["total_pages"] == math.ceil(80 / 7)
    assert [r["record_id"] for page in pages for r in page["rows"]] == [r["record_id"] for r in whole["rows"]]
    assert [r["rank"] for r in whole["rows"]] == list(range(1, 81))


@FOUR_LISTS
def test_page_holds_30_records_unless_page_size_says_otherwise(
    four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection
) -> None:
    found = scalar(db, "select emem.e_gather_find_envelope('apollo INV-2031', %s)", (QUESTION_VECTOR,))
    assert (found["page_size"], len(found["rows"]), found["total_pages"]) == (30, 30, 3)


@FOUR_LISTS
def test_each_list_is_sorted_by_distance(four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection) -> None:
    rows = envelope(db, "apollo INV-2031", QUESTION_VECTOR, page_size=1000)["rows"]
    for name in ("record_vectors", "window_vectors"):
        distances = [r["distance"] for r in rows if r["placed_by"] == name]
        assert distances == sorted(distances) and len(distances) == 20
    vector_ids = [r["record_id"] for r in rows if r["placed_by"] == "record_vectors"]
    assert vector_ids == four_disjoint_lists["record_vectors"]


@FOUR_LISTS
def test_exhausted_list_leaves_the_others_going(
    four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection
) -> None:
    rows = envelope(db, "apollo INV-2031", QUESTION_VECTOR, page_size=1000)["rows"]
    last_vector_rank = max(r["rank"] for r in rows if r["placed_by"] == "record_vectors")
    tail = [r["placed_by"] for r in rows if r["rank"] > last_vector_rank]
    assert "record_vectors" not in tail and tail
    assert all(r["rank"] for r in rows)


def test_record_found_twice_is_placed_once(corpus: psycopg.Connection) -> None:
    [both] = put(corpus, [{"content": "Kowalski about apollo", "tags": ["apollo"], "vector": unit(1, 0, 0, 0)}])
    found = envelope(corpus, "apollo Kowalski", QUESTION_VECTOR)
    assert [(r["record_id"], r["placed_by"]) for r in found["rows"]] == [(both, "record_vectors")]
    assert found["rows"][0]["found_by"] == ["record_vectors", "tags", "fulltext"]
    assert found["total_candidates"] == 1


def test_code_found_only_by_full_text_is_on_page_one_despite_200_closer_records(corpus: psycopg.Connection) -> None:
    put(
        corpus,
        [
            {"content": f"an invoice of another vendor, number {i}", "vector": unit(1, 0.001 * i, 0, 0)}
            for i in range(200)
        ],
    )
    [target] = put(corpus, [{"content": "Payment received for INV-2031.", "vector": unit(0, 1, 0, 0)}])
    rows = envelope(corpus, "status of INV-2031", QUESTION_VECTOR)["rows"]
    assert target in [r["record_id"] for r in rows]
    assert next(r for r in rows if r["record_id"] == target)["placed_by"] == "fulltext"


def test_code_is_searched_whole_never_its_pieces(corpus: psycopg.Connection) -> None:
    [whole, *_] = put(
        corpus,
        [
            {"content": "paid INV-2031 today"},
            {"content": "paid INV-2032 today"},
            {"content": "invoice 2031 of inv department"},
            {"content": "INV-20315 is other"},
        ],
    )
    rows = envelope(corpus, "INV-2031")["rows"]
    assert [r["record_id"] for r in rows] == [whole]


@pytest.mark.parametrize("term", ["max_wal_senders", "jan.kowalski@acme.com", "Q3", "4,311.60", "$1,200"])
def test_names_and_figures_are_found_as_typed(corpus: psycopg.Connection, term: str) -> None:
    [target] = put(corpus, [{"content": f"the value is {term} here"}])
    put(corpus, [{"content": "the value is something else here"}])
    assert [r["record_id"] for r in envelope(corpus, f"what about {term}")["rows"]] == [target]


def test_figure_counts_as_a_full_text_term(corpus: psycopg.Connection) -> None:
    [target] = put(corpus, [{"content": "we shipped 41 boxes"}])
    row = envelope(corpus, "41")["rows"][0]
    assert (row["record_id"], row["found_by"]) == (target, ["fulltext"])


def test_plural_question_matches_singular_tag_and_multi_word_tag_needs_all_words(corpus: psycopg.Connection) -> None:
    invoice, apollo = put(corpus, [{"content": "a", "tags": ["invoice"]}, {"content": "b", "tags": ["Project Apollo"]}])
    assert [r["record_id"] for r in envelope(corpus, "all invoices")["rows"]] == [invoice]
    assert envelope(corpus, "apollo")["rows"] == []
    assert [r["record_id"] for r in envelope(corpus, "apollo project")["rows"]] == [apollo]


def test_matching_edge_brings_both_endpoint_records(corpus: psycopg.Connection) -> None:
    kowalski, migration, other = put(corpus, [{"content": "Jan K."}, {"content": "the migration"}, {"content": "x"}])
    corpus.execute(
        "select emem.link_records(%s, %s, 'billed', %s)",
        (kowalski, migration, json.dumps({"invoice": "INV-77", "amount": "1200 EUR"})),
    )
    for question in ("who was billed?", "inv-77", "1200 EUR"):
        rows = envelope(corpus, question)["rows"]
        assert sorted(r["record_id"] for r in rows) == [kowalski, migration], question
        assert all("tags" in r["found_by"] for r in rows)
    assert other


def test_tag_candidates_get_cosine_distance_or_the_worst_without_vector(corpus: psycopg.Connection) -> None:
    with_vector, without = put(
        corpus, [{"content": "a", "tags": ["apollo"], "vector": unit(0, 1, 0, 0)}, {"content": "b", "tags": ["apollo"]}]
    )
    corpus.execute("set emem.pipeline_profile = 'tags'")
    rows = {r["record_id"]: r for r in envelope(corpus, "apollo", QUESTION_VECTOR)["rows"]}
    assert rows[with_vector]["distance"] == pytest.approx(1.0)
    assert rows[with_vector]["distance_kind"] == "cosine"
    assert (rows[without]["distance"], rows[without]["distance_kind"]) == (2.0, "placeholder")


def test_window_adds_every_record_it_was_made_from_with_its_best_distance(corpus: psycopg.Connection) -> None:
    turns = put(
        corpus,
        [{"kind": "conversation", "content": f"turn {i}", "thread_id": "c", "thread_position": i} for i in range(4)],
    )
    near = scalar(corpus, "select emem.put_window(%s, %s::vector)", (turns[0:2], str(unit(1, 0.1, 0, 0))))
    far = scalar(corpus, "select emem.put_window(%s, %s::vector)", (turns[1:4], str(unit(1, 1, 0, 0))))
    rows = {r["record_id"]: r for r in envelope(corpus, "anything at all", QUESTION_VECTOR)["rows"]}
    assert set(rows) == set(turns)
    assert rows[turns[1]]["windows"] == [near, far]
    assert rows[turns[1]]["distance"] == pytest.approx(rows[turns[0]]["distance"])
    assert rows[turns[3]]["windows"] == [far]
    assert rows[turns[3]]["distance"] > rows[turns[1]]["distance"]


@FOUR_LISTS
def test_degraded_mode_answers_from_tags_edges_and_full_text_with_placeholders(
    four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection
) -> None:
    found = envelope(db, "apollo INV-2031", page_size=1000)
    assert (found["degraded"], found["degraded_reason"]) == (True, "no_vector")
    assert {r["placed_by"] for r in found["rows"]} == {"tags", "fulltext"}
    assert found["total_candidates"] == 40
    assert {(r["distance"], r["distance_kind"]) for r in found["rows"]} == {(2.0, "placeholder")}


def test_degraded_order_is_lexical_most_matched_terms_first(corpus: psycopg.Connection) -> None:
    one, two, also_one = put(
        corpus,
        [
            {"content": "a", "tags": ["apollo"]},
            {"content": "b", "tags": ["apollo", "invoice"]},
            {"content": "c", "tags": ["invoice"]},
        ],
    )
    corpus.execute("set emem.pipeline_profile = 'tags'")
    assert [r["record_id"] for r in envelope(corpus, "apollo invoice")["rows"]] == [two, one, also_one]


def test_authority_and_dates_never_affect_the_order(corpus: psycopg.Connection) -> None:
    items = [{"content": f"r{i}", "tags": ["apollo"], "vector": unit(1, 1, 0, 0)} for i in range(4)]
    first = put(
        corpus,
        [
            dict(item, authority=a, occurred_at=d)
            for item, a, d in zip(
                items, (0, 1, 0.2, 0.9), ("2020-01-01", "2026-01-01", "1999-01-01", "2024-01-01"), strict=True
            )
        ],
    )
    assert [r["record_id"] for r in envelope(corpus, "apollo", QUESTION_VECTOR)["rows"]] == first


def test_wrong_dimension_is_an_error_naming_both(corpus: psycopg.Connection) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=r"has 3 dimensions .* has 4"):
        envelope(corpus, "anything", "[1,0,0]")


@FOUR_LISTS
def test_profile_with_one_lookup_removed(four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection) -> None:
    db.execute("set emem.pipeline_profile = 'record_vectors, tags, fulltext'")
    found = envelope(db, "apollo INV-2031", QUESTION_VECTOR, page_size=1000)
    assert {r["placed_by"] for r in found["rows"]} == {"record_vectors", "tags", "fulltext"}
    assert found["total_candidates"] == 60
    # 40:35:5 by the same rule: full text's first slot comes ninth.
    assert placed_letters(envelope(db, "apollo INV-2031", QUESTION_VECTOR, page_size=16)) == "VTVTVTVTFVTVTVTV"


def test_unknown_lookup_in_the_profile_is_a_clear_error(corpus: psycopg.Connection) -> None:
    corpus.execute("set emem.pipeline_profile = 'tags, colours'")
    with pytest.raises(errors.InvalidParameterValue, match=r"unknown lookup 'colours'.*known lookups: record_vectors"):
        envelope(corpus, "anything", QUESTION_VECTOR)


def test_page_is_cut_before_lane_filter(
    corpus: psycopg.Connection, make_role: Callable[..., str], dsn: Callable[..., str]
) -> None:
    corpus.execute("select emem.create_agent_profile('sales_agent', array['sales'])")
    role = make_role("sales", "sales_agent")
    put(
        corpus,
        [{"content": f"apollo note {i}", "tags": ["apollo"], "lane": "sales" if i % 3 else "hr"} for i in range(12)],
    )
    admin_pages = [envelope(corpus, "apollo", page=p, page_size=5) for p in (1, 2, 3)]
    with psycopg.connect(dsn(role), autocommit=True) as agent:
        for page, admin in enumerate(admin_pages, start=1):
            mine = envelope(agent, "apollo", page=page, page_size=5)
            assert (mine["total_pages"], mine["total_candidates"]) == (3, 12)
            assert mine["rows"] == [r for r in admin["rows"] if r["lane"] == "sales"]
            assert [r["rank"] for r in admin["rows"]] == list(range(page * 5 - 4, min(page * 5, 12) + 1))
        assert len(envelope(agent, "apollo", page=1, page_size=5)["rows"]) < 5


def test_envelope_gives_totals_when_every_row_of_the_page_was_removed(
    corpus: psycopg.Connection, make_role: MakeRole, dsn: Callable[..., str]
) -> None:
    corpus.execute("select emem.create_agent_profile('sales_agent', array['sales'])")
    role = make_role("sales", "sales_agent")
    put(
        corpus,
        [
            {"content": "apollo hr", "tags": ["apollo"], "lane": "hr"},
            {"content": "apollo sales", "tags": ["apollo"], "lane": "sales"},
        ],
    )
    with psycopg.connect(dsn(role), autocommit=True) as agent:
        found = envelope(agent, "apollo", page=1, page_size=1)
        assert (found["rows"], found["total_pages"], found["total_candidates"]) == ([], 2, 2)
        assert found["degraded"] is True
        assert scalar(agent, "select count(*) from emem.e_gather_find('apollo', null, 1, 1)") == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("q", None, 0, 30), r"page 0 is out of range"),
        (("q", None, 1, 0), r"page_size 0 is out of range"),
        (("q", None, 1, 1001), r"page_size 1001 is out of range"),
        (("q", None, None, 30), r"page NULL is out of range"),
        (("q", None, 1, None), r"page_size NULL is out of range"),
        (("  ", None, 1, 30), r"the question is empty"),
        ((None, None, 1, 30), r"the question is empty"),
        (("x" * 10_001, None, 1, 30), r"the question has 10001 characters"),
        (("q", "[0,0,0,0]", 1, 30), r"zero vector"),
    ],
)
def test_out_of_range_arguments_get_a_clear_error(
    corpus: psycopg.Connection, args: tuple[str | None, str | None, int | None, int | None], message: str
) -> None:
    with pytest.raises(errors.InvalidParameterValue, match=message):
        corpus.execute("select emem.e_gather_find_envelope(%s, %s, %s, %s)", args)


@pytest.mark.parametrize(
    "question",
    [
        "'); drop table emem.records; --",
        "a & b | !c:* (d)",
        "\\ \\\\ '' \"",
        "select * from pg_authid",
        "INV-2031 | x:*",
        "日本語 ünïcödé 🙂",
        "\t\r\n\x01",
        "'INV-2031'",
    ],
)
def test_question_text_is_data_never_syntax(corpus: psycopg.Connection, question: str) -> None:
    [target] = put(corpus, [{"content": "The 'INV-2031' invoice; drop table? select * from pg_authid", "tags": ["a"]}])
    found = envelope(corpus, question)
    assert scalar(corpus, "select count(*) from emem.records") == 1
    assert all(r["record_id"] == target for r in found["rows"])


@FOUR_LISTS
def test_explain_shows_the_analysed_question_and_each_lookup(
    four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection
) -> None:
    explained = scalar(db, "select emem.e_gather_explain('apollo INV-2031 invoices', %s)", (QUESTION_VECTOR,))
    assert explained["question"] == {
        "terms": ["apollo", "inv-2031", "invoice"],
        "known_words": ["apollo", "invoice"],
        "unknown_terms": ["INV-2031"],
    }
    assert {name: v["candidates"] for name, v in explained["lookups"].items()} == {
        "record_vectors": 20,
        "tags": 20,
        "window_vectors": 20,
        "fulltext": 20,
    }
    assert all(v["milliseconds"] >= 0 for v in explained["lookups"].values())


@FOUR_LISTS
def test_explain_shows_each_lookups_plan_and_the_statements_it_ran(
    four_disjoint_lists: dict[str, list[int]], db: psycopg.Connection
) -> None:
    """For the owner: what each lookup decided to read and why, the shape of the list built from it,
    and every statement it ran (name, text, rows, time); then the merge's, totals' and rows'."""
    explained = scalar(db, "select emem.e_gather_explain('apollo INV-2031 invoices', %s)", (QUESTION_VECTOR,))
    lookups = explained["lookups"]
    assert lookups["record_vectors"]["plan"] == {"kind": "whole", "reason": "the nearest 20 record vectors (HNSW)"}
    assert lookups["tags"]["plan"]["kind"] == "whole" and "records" in lookups["tags"]["plan"]["reason"]
    assert lookups["tags"]["reads"]["list"] == "FetchedList"
    names = {name: [s["name"] for s in lookup["statements"]] for name, lookup in lookups.items()}
    assert names["tags"][:2] == ["tags.tag_match", "edges.matched_labels"] and "tags.tags_by_distance" in names["tags"]
    assert "vectors.nearest" in names["record_vectors"] and "fulltext.term_queries" in names["fulltext"]
    [statement] = [s for s in lookups["tags"]["statements"] if s["name"] == "tags.tags_by_distance"]
    assert statement["rows"] == 20 and "emem.record_tags" in statement["sql"] and statement["milliseconds"] >= 0
    assert lookups["tags"]["statements"][-1]["name"] == "reader.distances"  # then their distances, by id
    assert [s["name"] for s in explained["statements"]["rows"]] == ["find.page_rows"]


def test_timeline_lists_records_by_date_within_bounds(corpus: psycopg.Connection) -> None:
    a, b, c = put(
        corpus,
        [
            {"content": "a", "occurred_at": "2026-03-01T00:00:00Z", "tags": ["x"]},
            {"content": "b", "occurred_at": "2026-01-01T00:00:00Z"},
            {"content": "c", "occurred_at": "2026-05-01T00:00:00Z", "kind": "entity", "tags": ["x"]},
        ],
    )
    ids = [r[0] for r in corpus.execute("select record_id from emem.e_timeline('2026-01-01', '2026-03-01')")]
    assert ids == [b, a]
    assert [
        r[0]
        for r in corpus.execute("select record_id from emem.e_timeline('2026-01-01', '2027-01-01', tags => array['X'])")
    ] == [a, c]
    assert [
        r[0]
        for r in corpus.execute(
            "select record_id from emem.e_timeline('2026-01-01', '2027-01-01', kinds => array['entity'])"
        )
    ] == [c]
    assert [
        r[0] for r in corpus.execute("select record_id from emem.e_timeline('2026-01-01', '2027-01-01', 2, 2)")
    ] == [c]
    with pytest.raises(errors.InvalidParameterValue, match="from_time <= to_time"):
        corpus.execute("select * from emem.e_timeline('2027-01-01', '2026-01-01')")
    with pytest.raises(errors.InvalidParameterValue, match="unknown kind"):
        corpus.execute("select * from emem.e_timeline('2026-01-01', '2027-01-01', kinds => array['memo'])")


def test_explain_shows_each_rows_rank_in_every_list(corpus: psycopg.Connection) -> None:
    both, tagged = put(
        corpus,
        [
            {"content": "Kowalski about apollo", "tags": ["apollo"], "vector": unit(1, 0, 0, 0)},
            {"content": "b", "tags": ["apollo"], "vector": unit(0, 1, 0, 0)},
        ],
    )
    explained = scalar(corpus, "select emem.e_gather_explain('apollo Kowalski', %s, 1, 10)", (QUESTION_VECTOR,))
    ranks = {row["record_id"]: row["list_ranks"] for row in explained["rows"]}
    assert ranks[both] == {"record_vectors": 1, "tags": 1, "window_vectors": None, "fulltext": 1}
    assert ranks[tagged] == {"record_vectors": 2, "tags": 2, "window_vectors": None, "fulltext": None}
