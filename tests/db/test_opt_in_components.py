"""Opt-in pipeline components that put exact matches first; the default profile is untouched."""

from pathlib import Path

import psycopg
import pytest
from checkout import ROOT
from databases import MakeRole
from finds import envelope, record_ids
from queries import scalar
from writes import put

from emem_db.profile import parse_profile
from emem_db.registry import SEED_WEIGHTS

CONTROL = ROOT / "control"


def profile_line(path: Path) -> str:
    line = next(ln for ln in path.read_text().splitlines() if ln.startswith("emem.pipeline_profile"))
    return line.split("=", 1)[1].strip().strip("'")


def test_settings_template_keeps_the_seed_profile() -> None:
    assert parse_profile(profile_line(CONTROL / "emem.conf")) == SEED_WEIGHTS


def test_recommended_profile_uses_the_opt_in_components() -> None:
    weights = parse_profile(profile_line(CONTROL / "exact_first.conf"))
    assert {"tags_by_terms", "fulltext_by_rarity"} <= set(weights)


def zentrix(db: psycopg.Connection, make_role: MakeRole) -> dict[str, int]:
    """Ten near-duplicate invoices of one vendor that differ only in number and amount."""
    db.execute("select emem.create_lane('l')")
    db.execute("select emem.create_embedding_space('m', 3, null, true)")
    items = [
        {
            "content": f"Zentrix invoice INV-{2030 + i} over {100 * i} EUR",
            "tags": ["invoice", "zentrix", f"inv-{2030 + i}"],
            "vector": [1, 0.01 * (10 - i), 0],
        }
        for i in range(10)
    ]
    items += [
        {
            "content": f"Zentrix memo {i} about the migration schedule",
            "tags": ["zentrix"],
            "vector": [0, 1, 0.1 * i],
        }
        for i in range(30)
    ]
    ids = put(db, items, lane="l")
    return {"INV-2031": ids[1], "memo": ids[10]}


ZENTRIX = pytest.mark.corpus(zentrix, read_only=True)


@pytest.fixture
def invoices(built: dict[str, int]) -> dict[str, int]:
    """The invoice INV-2031 and the first memo."""
    return built


def ranks(db: psycopg.Connection, profile: str, question: str, vector: str | None = "[1,0,0]") -> list[int]:
    db.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    return record_ids(envelope(db, question, vector, 1, 100))


@ZENTRIX
def test_tags_by_terms_puts_the_record_matching_most_terms_first(
    db: psycopg.Connection, invoices: dict[str, int]
) -> None:
    question = "zentrix invoice INV-2031"
    assert ranks(db, "tags", question)[0] != invoices["INV-2031"]
    assert ranks(db, "tags_by_terms", question)[0] == invoices["INV-2031"]
    assert ranks(db, "tags_by_terms", question, None)[0] == invoices["INV-2031"]


@ZENTRIX
def test_fulltext_by_rarity_puts_the_rare_term_first(db: psycopg.Connection, invoices: dict[str, int]) -> None:
    question = "Zentrix INV-2031"
    assert ranks(db, "fulltext", question)[0] != invoices["INV-2031"]
    assert ranks(db, "fulltext_by_rarity", question)[0] == invoices["INV-2031"]


@ZENTRIX
def test_fulltext_words_searches_words_wordnet_knows_too(db: psycopg.Connection, invoices: dict[str, int]) -> None:
    assert ranks(db, "fulltext", "migration schedules") == []
    found = ranks(db, "fulltext_words", "migration schedules", None)
    assert len(found) == 30 and invoices["memo"] in found


@ZENTRIX
def test_opt_in_component_runs_beside_the_seed_lookups_in_its_weight(
    db: psycopg.Connection, invoices: dict[str, int]
) -> None:
    """Past its exact head (the one invoice all three terms name), in turns with record_vectors."""
    db.execute("set emem.pipeline_profile = 'record_vectors:1, tags_by_terms:1'")
    found = envelope(db, "zentrix invoice INV-2031", "[0,1,0]", 1, 5)
    assert [r["placed_by"] for r in found["rows"]] == ["tags_by_terms", *["record_vectors", "tags_by_terms"] * 2]
    assert found["pipeline_profile"] == {"record_vectors": 1, "tags_by_terms": 1}


@ZENTRIX
@pytest.mark.parametrize("vector", ["[0,1,0]", None])
def test_a_narrow_exact_head_is_placed_before_the_weights_a_broad_top_is_not(
    db: psycopg.Connection, invoices: dict[str, int], vector: str | None
) -> None:
    """However small its weight, a list of an exact_head lookup places the few records sharing its
    top score first (the invoice a code names); a top that 40 records share (`zentrix`) is no head.
    The seed's lookups have none: their pages are the weights' alone."""
    db.execute("set emem.pipeline_profile = 'record_vectors:1000, tags_by_terms:1, fulltext_by_rarity:1'")
    explained = scalar(db, "select emem.e_gather_explain('zentrix INV-2031', %s, 1, 3)", (vector,))
    first = explained["rows"][0]
    assert (first["record_id"], first["placed_by"]) == (invoices["INV-2031"], "tags_by_terms")
    assert {"tags_by_terms", "fulltext_by_rarity"} <= set(first["found_by"])
    heads = {name: lookup["exact_head"] for name, lookup in explained["lookups"].items()}
    assert heads == {"tags_by_terms": 1, "fulltext_by_rarity": 1} | ({"record_vectors": 0} if vector else {})
    broad = scalar(db, "select emem.e_gather_explain('zentrix', %s, 1, 3)", (vector,))
    assert broad["lookups"]["tags_by_terms"]["exact_head"] == 0
    db.execute("set emem.pipeline_profile = 'record_vectors:1000, tags:1, fulltext:1'")
    seed = scalar(db, "select emem.e_gather_explain('zentrix INV-2031', %s, 1, 3)", (vector,))
    assert {lookup["exact_head"] for lookup in seed["lookups"].values()} == {0}
    if vector:
        assert [row["placed_by"] for row in seed["rows"]] == ["record_vectors"] * 3


@ZENTRIX
def test_explain_ranks_a_row_deep_in_a_scored_list(db: psycopg.Connection, invoices: dict[str, int]) -> None:
    """The page reaches the invoices' score levels of tags_by_terms only; explain still ranks the
    memos that record_vectors placed: after the ten invoices, nearest first."""
    db.execute("set emem.pipeline_profile = 'record_vectors:1, tags_by_terms:1'")
    explained = scalar(db, "select emem.e_gather_explain('zentrix invoice INV-2031', '[0,1,0]', 1, 4)")
    memos = [row for row in explained["rows"] if row["placed_by"] == "record_vectors"]
    assert [row["record_id"] for row in memos] == [invoices["memo"], invoices["memo"] + 1]
    assert [row["list_ranks"]["tags_by_terms"] for row in memos] == [11, 12]
    assert [row["list_ranks"]["record_vectors"] for row in memos] == [1, 2]


@ZENTRIX
@pytest.mark.parametrize("profile", ["tags_by_terms:0", "fulltext_words, fulltext_words", "tags_by_term"])
def test_bad_opt_in_profiles_are_refused(db: psycopg.Connection, invoices: dict[str, int], profile: str) -> None:
    db.execute("select set_config('emem.pipeline_profile', %s, false)", (profile,))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"emem\.pipeline_profile"):
        db.execute("select emem.e_gather_find_envelope('acme', null)")


def test_fulltext_words_frequencies_follow_analyze(db: psycopg.Connection) -> None:
    """A word's frequency comes from the column's statistics when they hold it: a word on 10% of
    the records is searched; after it turns common and the table is analysed again, the same
    connection (which keeps the statistics it read) leaves it out."""
    db.execute("select emem.create_lane('l')")

    def put_notes(count: int, budget_every: int) -> None:
        contents = [
            f"note {i}" + (" budget" if i % budget_every == 0 else "") + (" zeppelin" if i % 300 == 1 else "")
            for i in range(count)
        ]
        put(db, [{"content": content} for content in contents], lane="l")

    def total() -> int:
        found = scalar(db, "select emem.e_gather_find_envelope('budget zeppelin', null, 1, 30)")
        candidates: int = found["total_candidates"]
        return candidates

    put_notes(3000, budget_every=10)
    db.execute("set emem.pipeline_profile = 'fulltext_words'")
    db.execute("analyze emem.records")
    assert total() == 300 + 10  # from the statistics: budget on 300 records is telling
    put_notes(3000, budget_every=1)
    db.execute("analyze emem.records")
    assert total() == 10 + 10  # budget on 3,300 of 6,000 records says too little: zeppelin alone
