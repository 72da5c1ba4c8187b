"""Sets of records rendered into SQL (sets.SetSql) outside the server: each form of each kind, the
caller's lanes kept in every form, quoting, and what explain shows of a set."""

import pytest
from fake_plpy import FakePlpy

from emem_db.sets import (
    NOTHING,
    AnyOf,
    FarTagged,
    LabelEnds,
    Listed,
    RecordSet,
    SetSql,
    Tagged,
    TextMatching,
    Tier,
    describe,
    unique_ids,
)

LANES = "array['own']::text[]"
KINDS: list[RecordSet] = [
    Tagged(("invoice", "o'brien")),
    TextMatching("'q3' & 'inv-7'"),
    LabelEnds(("paid",)),
    FarTagged(("paid",), ("ledger",)),
    Listed((3, 1, 2)),
    AnyOf((Tagged(("invoice",)), Listed((9,)))),
    Tier((Tagged(("common",)), LabelEnds(("paid",))), (TextMatching("'q3'"),), walk_from=1),
]


def sets(lanes: str | None = None) -> SetSql:
    return SetSql(FakePlpy(), lanes)


def test_tags_are_quoted_as_literals() -> None:
    held = sets().holds(Tagged(("o'brien",)), "r.record_id")
    assert "array['o''brien']::text[]" in held and "rt.record_id = r.record_id" in held


def test_nothing_holds_no_record_and_lists_no_id() -> None:
    for empty in (NOTHING, AnyOf(())):
        assert sets().holds(empty, "id") == "false"
    assert sets().ids(AnyOf(())) == sets().ids(NOTHING) == "select pg_catalog.unnest('{}'::bigint[]) as record_id"


@pytest.mark.parametrize("records", KINDS, ids=lambda records: type(records).__name__)
def test_every_form_keeps_to_the_callers_lanes(records: RecordSet) -> None:
    """Strict isolation: a set that reads a lane column reads it within the lanes in every form;
    the records at hand (Listed) come from lists already within them."""
    within, everywhere = sets(LANES), sets()
    forms = {
        "holds": (within.holds(records, "x.id"), everywhere.holds(records, "x.id")),
        "ids": (within.ids(records), everywhere.ids(records)),
        "count": (within.count(records), everywhere.count(records)),
    }
    reads_lanes = not isinstance(records, Listed)
    for name, (kept, free) in forms.items():
        assert LANES not in free, name
        assert (LANES in kept) == reads_lanes, name
    ordered = within.ids_in_order(records)
    if ordered is not None and reads_lanes:
        assert LANES in ordered[0]


def test_an_edge_labels_ends_count_within_lanes_only_when_both_ends_lie_in_them() -> None:
    held = sets(LANES).holds(LabelEnds(("paid",)), "x.id")
    assert f"el.lane_name operator(pg_catalog.=) any ({LANES})" in held
    assert f"el.far_lane_name operator(pg_catalog.=) any ({LANES})" in held


@pytest.mark.parametrize(
    ("records", "ordered", "cheaply"),
    [
        (Tagged(("invoice",)), True, True),  # the tag's index gives its records in id order
        (Tagged(("invoice", "apollo")), False, None),
        (LabelEnds(tuple(f"l{n}" for n in range(SetSql.MAX_ORDERED_LABELS))), True, True),
        (LabelEnds(tuple(f"l{n}" for n in range(SetSql.MAX_ORDERED_LABELS + 1))), False, None),
        (TextMatching("'q3'"), True, False),  # walked in id order, probing the text
        (Tier((Tagged(("a", "b")), Tagged(("c",))), (), walk_from=0), True, True),  # its source read whole
        (Tier((TextMatching("'q3'"), Tagged(("c",))), (), walk_from=0), True, False),
        (Listed((1, 2)), False, None),
    ],
)
def test_which_sets_have_their_ids_in_record_id_order(records: RecordSet, ordered: bool, cheaply: bool | None) -> None:
    found = sets().ids_in_order(records)
    assert (found is not None) == ordered
    if found is not None:
        sql, cheap = found
        assert cheap == cheaply and "order by" in sql


def test_a_union_of_label_ranges_keeps_record_id_order() -> None:
    sql, _ = sets().ids_in_order(LabelEnds(("paid", "billed"))) or ("", False)
    assert sql.count("order by el.record_id") == 2 and sql.endswith("order by u.record_id")


@pytest.mark.parametrize(
    ("records", "unique"),
    [
        (Tagged(("a",)), True),
        (Tagged(("a", "b")), False),  # a record carrying both tags comes twice
        (AnyOf((Tagged(("a",)),)), True),
        (AnyOf((Tagged(("a",)), Tagged(("b",)))), False),
        (Tier((Tagged(("a", "b")), Tagged(("c",))), (), walk_from=1), True),
        (Tier((Tagged(("a", "b")), Tagged(("c",))), (), walk_from=0), False),
        (LabelEnds(("paid", "billed")), True),
        (TextMatching("'q3'"), True),
    ],
)
def test_counts_leave_out_duplicates_only_where_a_set_has_them(records: RecordSet, unique: bool) -> None:
    assert unique_ids(records) == unique
    counted = sets().count_up_to(records, 101)
    assert ("select distinct i.record_id" in counted) == (not unique)
    assert counted.endswith("limit 101) as capped")


def test_a_tier_holds_every_held_set_and_no_excluded_one() -> None:
    tier = Tier((Tagged(("a",)), Tagged(("b",))), (Tagged(("c",)),), walk_from=0)
    held = sets().holds(tier, "x.id")
    assert held.count("exists (select 1 from emem.record_tags") == 3 and held.count("not (") == 1
    # Its ids: those of the set it walks from, probed for the rest of the tier.
    source, condition = sets().ids(tier).split(" as found (record_id) where ", 1)
    assert source == f"select found.record_id from ({sets().ids(Tagged(('a',)))})"
    assert condition == sets().holds(Tier((Tagged(("b",)),), (Tagged(("c",)),)), "found.record_id")
    assert sets().ids(Tier((Tagged(("a",)),), ())).endswith(" as found (record_id) where true")


def test_explain_shows_a_sets_kind_and_values_but_only_the_count_of_its_ids() -> None:
    shown = describe(AnyOf((Tagged(("a", "b")), Listed(tuple(range(5_000))))))
    assert shown == {
        "set": "AnyOf",
        "members": [{"set": "Tagged", "tags": ["a", "b"]}, {"set": "Listed", "ids": 5_000}],
    }
    assert describe(Tier((TextMatching("'q3'"),), (), 0)) == {
        "set": "Tier",
        "held": [{"set": "TextMatching", "tsquery": "'q3'"}],
        "excluded": [],
        "walk_from": 0,
    }


def test_an_unknown_kind_of_set_is_refused() -> None:
    with pytest.raises(TypeError):
        sets().holds(("not", "a set"), "x.id")  # type: ignore[arg-type]
