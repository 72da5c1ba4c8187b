"""A broad tag or term (more candidates than are fetched whole) gives the same answers as an exact
reading: its list is read from the HNSW index as far as the merge reaches, its size counted."""

import random
from itertools import chain

import psycopg
import pytest
from databases import MakeRole
from finds import envelope, explain, record_ids
from queries import scalar
from vectors import unit
from writes import put

from emem_db.tuning import DEFAULT_TUNING

QUESTION_VECTOR = [1.0, 0.0, 0.0, 0.0]
BROAD = DEFAULT_TUNING.exact_candidates + 400


def broad(db: psycopg.Connection, make_role: MakeRole) -> None:
    """A tag on more records than are fetched whole, a rare tag on some of them and on a few
    others, and a term (Q3) on most; a tenth of the records without a vector."""
    rng = random.Random(7)
    db.execute("select emem.create_lane('l')")
    db.execute("select emem.create_embedding_space('m', 4, null, true)")
    items = [
        {
            "kind": "note",
            "content": f"broad record {i}" + (" in Q3" if i % 10 != 1 else ""),
            "lane": "l",
            "tags": ["broad"] + (["rare"] if i % 100 == 0 else []),
            **({"vector": unit(*[rng.uniform(-1, 1) for _ in range(4)])} if i % 10 else {}),
        }
        for i in range(BROAD)
    ]
    items += [
        {
            "kind": "note",
            "content": f"rare only {i} INV-7",
            "lane": "l",
            "tags": ["rare"],
            "vector": unit(*[rng.uniform(-1, 1) for _ in range(4)]),
        }
        for i in range(30)
    ]
    for start in range(0, len(items), 1000):
        put(db, items[start : start + 1000])


pytestmark = pytest.mark.corpus(broad, read_only=True)
WRITES = pytest.mark.corpus(broad, read_only=False)


def exact_tag_order(db: psycopg.Connection, tags: list[str]) -> list[int]:
    rows = db.execute(
        """select t.record_id from (select distinct record_id from emem.record_tags where tag = any(%s)) t
           left join emem.record_vectors v using (record_id)
           order by v.embedding <=> %s::vector nulls last, t.record_id""",
        (tags, str(QUESTION_VECTOR)),
    )
    return [r[0] for r in rows]


def test_broad_tag_list_is_in_distance_order_then_records_without_vector(db: psycopg.Connection) -> None:
    db.execute("set emem.pipeline_profile = 'tags'")
    first = envelope(db, "broad", QUESTION_VECTOR, 1, 50)
    assert first["total_candidates"] == BROAD
    assert [r["record_id"] for r in first["rows"]] == exact_tag_order(db, ["broad"])[:50]
    whole = [r["record_id"] for p in range(1, 4) for r in envelope(db, "broad", QUESTION_VECTOR, p, 1000)["rows"]]
    assert whole == exact_tag_order(db, ["broad"])


def test_broad_and_rare_tags_together_count_each_record_once(db: psycopg.Connection) -> None:
    result = envelope(db, "broad rare INV-7", QUESTION_VECTOR, 1, 30)
    expected = scalar(
        db,
        """select count(*) from (select record_id from emem.record_tags where tag in ('broad', 'rare')
           union select record_id from emem.records where content like '%%INV-7%%'
           union (select record_id from emem.record_vectors
                  order by embedding <=> %s::vector limit 100)) as u""",
        (str(QUESTION_VECTOR),),
    )
    assert result["total_candidates"] == expected
    for row in result["rows"]:
        assert ("tags" in row["found_by"]) == (row["record_id"] in set(exact_tag_order(db, ["broad", "rare"])))


def test_page_one_of_a_broad_tag_holds_its_nearest_records(db: psycopg.Connection) -> None:
    rows = envelope(db, "broad", QUESTION_VECTOR, 1, 30)["rows"]
    nearest = exact_tag_order(db, ["broad"])
    placed_by_tags = [r["record_id"] for r in rows if r["placed_by"] == "tags"]
    assert placed_by_tags and set(placed_by_tags) <= set(nearest[:60])


def test_degraded_broad_tag_lists_its_records_by_id(db: psycopg.Connection) -> None:
    rows = envelope(db, "broad", None, 2, 40)["rows"]
    ids = [r[0] for r in db.execute("select record_id from emem.record_tags where tag = 'broad' order by 1")]
    assert [r["record_id"] for r in rows] == ids[40:80]
    degraded_two = envelope(db, "broad rare", None, 1, 30)
    assert degraded_two["total_candidates"] == BROAD + 30
    assert all("rare" in r["tags"] and "broad" in r["tags"] for r in degraded_two["rows"][: BROAD // 100])


@WRITES
def test_tag_counts_follow_writes(db: psycopg.Connection) -> None:
    db.execute("set emem.pipeline_profile = 'tags'")
    some = db.execute("select record_id from emem.record_tags where tag = 'broad' limit 5").fetchall()
    for (record_id,) in some:
        db.execute("select emem.untag_record(%s, array['broad'])", (record_id,))
    db.execute("select emem.delete_records(array[(select min(record_id) from emem.record_tags where tag = 'broad')])")
    assert envelope(db, "broad", QUESTION_VECTOR, 1, 30)["total_candidates"] == BROAD - 6


def exact_term_order(db: psycopg.Connection) -> list[int]:
    rows = db.execute(
        """select r.record_id from emem.records r left join emem.record_vectors v using (record_id)
           where r.content_search @@ phraseto_tsquery('emem.exact', 'Q3')
           order by v.embedding <=> %s::vector nulls last, r.record_id""",
        (str(QUESTION_VECTOR),),
    )
    return [r[0] for r in rows]


def test_broad_term_list_is_in_distance_order_then_records_without_vector(db: psycopg.Connection) -> None:
    db.execute("set emem.pipeline_profile = 'fulltext'")
    expected = exact_term_order(db)
    assert len(expected) > DEFAULT_TUNING.exact_candidates
    first = envelope(db, "Q3", QUESTION_VECTOR, 1, 50)
    assert first["total_candidates"] == len(expected)
    assert [r["record_id"] for r in first["rows"]] == expected[:50]
    whole = [r["record_id"] for p in range(1, 4) for r in envelope(db, "Q3", QUESTION_VECTOR, p, 1000)["rows"]]
    assert whole == expected


def test_broad_tag_and_broad_term_together_count_each_record_once(db: psycopg.Connection) -> None:
    result = envelope(db, "broad rare Q3 INV-7", QUESTION_VECTOR, 1, 30)
    expected = scalar(
        db,
        """select count(*) from (select record_id from emem.record_tags where tag in ('broad', 'rare')
           union select record_id from emem.records
                 where content_search @@ (phraseto_tsquery('emem.exact', 'Q3')
                                          || phraseto_tsquery('emem.exact', 'INV-7'))
           union (select record_id from emem.record_vectors
                  order by embedding <=> %s::vector limit 100)) as u""",
        (str(QUESTION_VECTOR),),
    )
    assert result["total_candidates"] == expected
    terms = set(exact_term_order(db))
    for row in result["rows"]:
        assert ("fulltext" in row["found_by"]) == (row["record_id"] in terms or "INV-7" in row["content"])


@WRITES
def test_edge_endpoints_count_once_beside_broad_lists(db: psycopg.Connection) -> None:
    """Records reached only by an edge whose label the question names join the union of several
    broad lists once, as do the endpoints of such an edge that the lists hold already."""
    plain = put(db, [{"content": f"plain {i}"} for i in range(6)], lane="l")
    tagged = scalar(db, "select min(record_id) from emem.record_tags where tag = 'rare'")
    for start, end in [(plain[0], plain[1]), (plain[2], plain[3]), (plain[4], tagged), (plain[4], plain[5])]:
        db.execute("""select emem.link_records(%s, %s, 'paid', '{"for": "rare"}')""", (start, end))
    result = envelope(db, "broad rare Q3 INV-7", QUESTION_VECTOR, 1, 30)
    expected = scalar(
        db,
        """select count(*) from (select record_id from emem.record_tags where tag in ('broad', 'rare')
           union select record_id from emem.records
                 where content_search @@ (phraseto_tsquery('emem.exact', 'Q3')
                                          || phraseto_tsquery('emem.exact', 'INV-7'))
           union select unnest(array[from_record_id, to_record_id]) from emem.edges
           union (select record_id from emem.record_vectors
                  order by embedding <=> %s::vector limit 100)) as u""",
        (str(QUESTION_VECTOR),),
    )
    without_plain = scalar(db, "select count(distinct record_id) from emem.record_tags where tag in ('broad', 'rare')")
    assert result["total_candidates"] == expected and expected >= without_plain + len(plain)


LATE_TERM = "Zorblat"  # only on records written after the corpus: the top of the record ids


@WRITES
def test_degraded_term_held_only_at_the_top_of_the_ids_reads_its_first_records_not_the_whole_match(
    db: psycopg.Connection,
) -> None:
    """A walk in record-id order passes the corpus below the term's records without finding one; the
    match is then read by its own index and its first records kept, the same page as the whole match
    in record-id order, without reading the whole match (which took 472 ms for another lane's
    100,000 matches)."""
    late = put(
        db, [{"content": f"{LATE_TERM} report {i}"} for i in range(DEFAULT_TUNING.exact_candidates + 100)], lane="l"
    )
    db.execute("set emem.pipeline_profile = 'fulltext'")
    assert record_ids(envelope(db, LATE_TERM, None, 2, 30)) == sorted(late)[30:60]
    explained = explain(db, LATE_TERM, None, 2, 30)
    statements = [*explained["lookups"]["fulltext"]["statements"], *chain(*explained["statements"].values())]
    assert "lists.broad.in_record_id_order" in {s["name"] for s in statements}  # the walk ran
    assert max(s["rows"] for s in statements) <= 60
