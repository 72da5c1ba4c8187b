"""Lists ordered by a score first (tags_by_terms, fulltext_by_rarity, and every tag list when
degraded) read their broad tags and terms in tiers, one per combination of them, as far as the
merge reaches. A tiered reading gives exactly the list, the totals and the explain ranks of a
whole reading (the same backend with tiering switched off)."""

import json
import math
import random
from typing import Any

import psycopg
import pytest
from databases import MakeRole
from finds import with_tuning
from queries import scalar
from vectors import unit

from emem_db.lookups.fulltext import BM25_B, BM25_K1, BM25_REFERENCE_LENGTH
from emem_db.tuning import DEFAULT_TUNING

EXACT_CANDIDATES = DEFAULT_TUNING.exact_candidates

RECORDS = 3300
VECTOR = "[1,0,0,0]"
MIXED = "did Kowalski pay INV-7 for the project apollo meeting in Q3?"


def tags_of(i: int) -> list[str]:
    return (
        [t for t, on in (("project", i % 5), ("meeting", i % 4)) if on]
        + (["project apollo"] if i % 97 == 0 else [])
        + (["apollo"] if i % 131 == 0 else [])
    )


def lane_and_space(db: psycopg.Connection) -> None:
    """Lane l and an active space of 4 dimensions."""
    db.execute("select emem.create_lane('l')")
    db.execute("select emem.create_embedding_space('m', 4, null, true)")


def tiers(db: psycopg.Connection, make_role: MakeRole) -> None:
    """Two broad tags and a broad term over near-duplicates, narrow tags and terms, edges, and
    records without a vector (which go last in their tier)."""
    rng = random.Random(11)
    lane_and_space(db)
    items = [
        {
            "kind": "note",
            "lane": "l",
            "tags": tags_of(i),
            "content": " ".join(
                ["note", str(i)]
                + (["Q3"] if i % 3 else [])
                + (["Kowalski"] if i % 50 == 0 else [])
                + (["INV-7"] if i % 333 == 0 else [])
            ),
            **({"vector": unit(*[rng.uniform(-1, 1) for _ in range(4)])} if i % 10 != 3 else {}),
        }
        for i in range(RECORDS)
    ]
    ids = []
    for start in range(0, len(items), 1000):
        ids += [
            r[0]
            for r in db.execute(
                "select record_id from emem.put_records(%s)", (json.dumps(items[start : start + 1000]),)
            )
        ]
    for n in range(0, 40, 4):
        db.execute(
            "select emem.link_records(%s, %s, 'paid', '{\"for\": \"project apollo meeting\"}')",
            (ids[n * 7 + 1], ids[n * 11 + 2]),
        )


pytestmark = pytest.mark.corpus(tiers, read_only=True)


def whole_reading(db: psycopg.Connection) -> None:
    """This backend reads every scored list whole from now on (no tiers: a broad part is one too many)."""
    db.execute(
        "do $$ import dataclasses; state = GD['emem_db']; state.tuning = dataclasses.replace(state.tuning,"
        " max_broad_parts=0) $$ language plpython3u"
    )


def answers(db: psycopg.Connection, profile: str, question: str, vector: str | None) -> dict[str, list[Any]]:
    db.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    pages = [
        scalar(db, "select emem.e_gather_find_envelope(%s, %s::vector, %s, %s)", (question, vector, page, size))
        for page, size in ((1, 30), (2, 30), (1, 1000))
    ]
    if pages[2]["total_pages"] > 1:
        pages += [
            scalar(db, "select emem.e_gather_find_envelope(%s, %s::vector, %s, 1000)", (question, vector, page))
            for page in range(2, pages[2]["total_pages"] + 1)
        ]
    explained = scalar(db, "select emem.e_gather_explain(%s, %s::vector, 1, 30)", (question, vector))
    return {
        "pages": [[(r["record_id"], r["placed_by"], r["found_by"]) for r in p["rows"]] for p in pages],
        "totals": [(p["total_candidates"], p["total_pages"]) for p in pages],
        "list_ranks": [r["list_ranks"] for r in explained["rows"]],
    }


CASES = [
    ("tags_by_terms", MIXED),
    ("tags_by_terms", "project meeting"),
    ("tags_by_terms:30, fulltext_by_rarity:30, record_vectors:30, window_vectors:10", MIXED),
    ("fulltext_by_rarity", MIXED),
    ("fulltext_by_rarity", "Q3 Kowalski"),
    ("record_vectors, tags, window_vectors, fulltext", MIXED),
]


@pytest.mark.parametrize("vector", [VECTOR, None], ids=["vector", "degraded"])
@pytest.mark.parametrize(("profile", "question"), CASES, ids=[f"{p.split(',')[0]}-{q[:12]}" for p, q in CASES])
def test_tiered_reading_gives_the_whole_reading(
    db: psycopg.Connection, profile: str, question: str, vector: str | None
) -> None:
    tiered = answers(db, profile, question, vector)
    whole_reading(db)
    whole = answers(db, profile, question, vector)
    assert tiered["pages"] == whole["pages"] and tiered["totals"] == whole["totals"]
    assert tiered["pages"][2], "the question finds nothing: the case tests nothing"
    # pages of 30 read the lists (and a scored list's distances) only as far as they reach: the
    # same records as the page of 1000 that reads them all
    assert tiered["pages"][0] + tiered["pages"][1] == tiered["pages"][2][:60]
    # explain's rank in a list read lazily is null beyond what was read, else the whole list's rank
    for lazy, read in zip(tiered["list_ranks"], whole["list_ranks"], strict=True):
        assert all(rank is None or rank == read[name] for name, rank in lazy.items())


def test_the_corpus_has_broad_and_narrow_parts(db: psycopg.Connection) -> None:
    counts: dict[str, int] = dict(db.execute("select tag, record_count from emem.tag_vocabulary").fetchall())
    assert counts["project"] > EXACT_CANDIDATES and counts["meeting"] > EXACT_CANDIDATES
    assert counts["project apollo"] <= EXACT_CANDIDATES and counts["apollo"] <= EXACT_CANDIDATES
    q3 = scalar(db, "select count(*) from emem.records where content_search @@ phraseto_tsquery('emem.exact', 'Q3')")
    assert q3 > EXACT_CANDIDATES


def test_tags_by_terms_puts_the_record_matching_most_terms_first(db: psycopg.Connection) -> None:
    db.execute("set emem.pipeline_profile = 'tags_by_terms'")
    envelope = scalar(db, "select emem.e_gather_find_envelope('project apollo meeting', %s::vector, 1, 200)", (VECTOR,))
    rows = envelope["rows"]
    linked = {
        r[0] for r in db.execute("select from_record_id from emem.edges union select to_record_id from emem.edges")
    }  # the edges' property names all three words
    covered = [
        3
        if row["record_id"] in linked
        else len(
            {
                word
                for tag in row["tags"]
                if tag in ("project", "meeting", "project apollo", "apollo")
                for word in tag.split()
            }
        )
        for row in rows
    ]
    assert covered == sorted(covered, reverse=True) and covered[0] == 3 and covered[-1] >= 1
    both_broad = [
        row
        for row, n in zip(rows, covered, strict=True)
        if n == 2 and {"project", "meeting"} <= set(row["tags"]) and "apollo" not in row["tags"]
    ]
    distances = [row["distance"] for row in both_broad]
    assert both_broad and distances == sorted(distances)


def test_degraded_full_text_is_by_terms_matched_then_bm25(db: psycopg.Connection) -> None:
    """Terms matched first, then BM25 over the narrow terms (Kowalski, INV-7: rarity, occurrences,
    length), then record id: the broad Q3 alone scores nothing more, its tier in record-id order."""
    db.execute("set emem.pipeline_profile = 'fulltext'")
    rows = [
        row
        for page in (1, 2, 3)
        for row in scalar(db, "select emem.e_gather_find_envelope('Kowalski INV-7 Q3', null, %s, 1000)", (page,))[
            "rows"
        ]
    ]
    terms = ("Kowalski", "INV-7", "Q3")
    frequencies = {
        term: scalar(
            db, "select count(*) from emem.records where content_search @@ phraseto_tsquery('emem.exact', %s)", (term,)
        )
        for term in terms
    }

    def bm25(content: str) -> float:
        score = 0.0
        for term in terms:
            tf, df = content.split().count(term), frequencies[term]
            if tf and df <= EXACT_CANDIDATES:
                idf = math.log(1 + (RECORDS - df + 0.5) / (df + 0.5))
                score += (
                    idf
                    * tf
                    * (BM25_K1 + 1)
                    / (tf + BM25_K1 * (1 - BM25_B + BM25_B * len(content) / BM25_REFERENCE_LENGTH))
                )
        return score

    keys = [
        (-sum(term in row["content"].split() for term in terms), -round(bm25(row["content"]), 6), row["record_id"])
        for row in rows
    ]
    assert keys == sorted(keys) and keys[0][0] == -2 and len(rows) > EXACT_CANDIDATES
    assert [key[2] for key in keys] != sorted(key[2] for key in keys)  # not by record id


def put_tagged_notes(db: psycopg.Connection, tags: list[list[str]]) -> None:
    """In lane l (and a 4-d space), a note per entry with those tags and a random vector."""
    rng = random.Random(5)
    lane_and_space(db)
    items = [
        {
            "kind": "note",
            "lane": "l",
            "content": f"note {i}",
            "tags": held,
            "vector": unit(*[rng.uniform(-1, 1) for _ in range(4)]),
        }
        for i, held in enumerate(tags)
    ]
    db.execute("select count(*) from emem.put_records(%s)", (json.dumps(items),))


def two_broad_tags(db: psycopg.Connection, make_role: MakeRole) -> None:
    """Tags alpha and beta on 1,700 records each, three records holding both."""
    put_tagged_notes(db, [["alpha", "beta"] if i < 3 else ["alpha" if i % 2 else "beta"] for i in range(3403)])


def three_broad_tags(db: psycopg.Connection, make_role: MakeRole) -> None:
    """Tags alpha, beta and delta on 600 records each, none holding two; the narrow gamma on three
    of alpha's."""
    put_tagged_notes(db, [[["alpha", "beta", "delta"][i // 600]] + (["gamma"] if i < 3 else []) for i in range(1800)])


def head_read_both_ways(db: psycopg.Connection, question: str, vector: str | None) -> list[int]:
    """tags_by_terms' exact head in tiers (broad tags of more than 500 records) and whole: the
    pages, totals and ranks of both readings are equal; the head's records, which must be 3."""
    with_tuning(db, exact_candidates=500)
    profile = "record_vectors:30, tags_by_terms:35"
    tiered = answers(db, profile, question, vector)
    explained = scalar(db, "select emem.e_gather_explain(%s, %s::vector, 1, 30)", (question, vector))
    assert explained["lookups"]["tags_by_terms"]["exact_head"] == 3
    whole_reading(db)
    assert answers(db, profile, question, vector) == tiered
    return [r["record_id"] for r in explained["rows"][:3]]


def first_notes(db: psycopg.Connection) -> set[int]:
    return {
        row[0]
        for row in db.execute("select record_id from emem.records where content in ('note 0', 'note 1', 'note 2')")
    }


@pytest.mark.corpus(two_broad_tags, read_only=True)
@pytest.mark.parametrize("vector", [VECTOR, None], ids=["vector", "degraded"])
def test_a_tiny_top_tier_is_an_exact_head_as_in_the_whole_reading(db: psycopg.Connection, vector: str | None) -> None:
    """The three records holding both broad tags are the top score of tags_by_terms: read in
    tiers (their combination of broad tags is a tier) or whole, they are its exact head and lead
    the page. (A tiered list once had no head when a tier held its top score, so that whether a
    page began with them followed the plan, which follows the table's size across all lanes.)"""
    assert set(head_read_both_ways(db, "alpha beta", vector)) == first_notes(db)


@pytest.mark.corpus(three_broad_tags, read_only=True)
@pytest.mark.parametrize("vector", [VECTOR, None], ids=["vector", "degraded"])
def test_an_empty_top_tier_leaves_the_head_to_the_next_level(db: psycopg.Connection, vector: str | None) -> None:
    """No record holds alpha, beta and delta together: the tiers of those combinations are empty,
    and the head is the three records holding alpha and gamma, read in tiers as read whole."""
    assert set(head_read_both_ways(db, "alpha beta delta gamma", vector)) == first_notes(db)
