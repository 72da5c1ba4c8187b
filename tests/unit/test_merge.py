"""The merge, as pure Python (the same module runs inside the database): smooth weighted
round-robin in the proportions 40:35:20:5, without duplicates, every candidate kept."""

from hypothesis import given, settings
from hypothesis import strategies as st

from emem_db.merge import TICK_EVERY, Candidate, interleave
from emem_db.registry import SEED_WEIGHTS

LOOKUP_LETTERS = {"record_vectors": "V", "tags": "T", "window_vectors": "W", "fulltext": "F"}


def disjoint_lists(sizes: dict[str, int]) -> dict[str, list[Candidate]]:
    lists, next_id = {}, 1
    for name, size in sizes.items():
        lists[name] = [Candidate(record_id, float(i)) for i, record_id in enumerate(range(next_id, next_id + size))]
        next_id += size
    return lists


lists_strategy = st.fixed_dictionaries(
    {name: st.lists(st.integers(min_value=1, max_value=60), max_size=40) for name in SEED_WEIGHTS}
).map(lambda ids: {name: [Candidate(i, float(n)) for n, i in enumerate(dict.fromkeys(v))] for name, v in ids.items()})


def test_first_slots_come_as_v_t_w_v_t_v_t_w_v_t_f() -> None:
    merged = interleave(disjoint_lists(dict.fromkeys(SEED_WEIGHTS, 50)), SEED_WEIGHTS, limit=11)
    assert "".join(LOOKUP_LETTERS[p.placed_by] for p in merged) == "VTWVTVTWVTF"


def test_page_of_30_takes_about_12_10_6_2() -> None:
    merged = interleave(disjoint_lists(dict.fromkeys(SEED_WEIGHTS, 50)), SEED_WEIGHTS, limit=30)
    counts = {name: sum(p.placed_by == name for p in merged) for name in SEED_WEIGHTS}
    # The reference rule repeats every 20 slots (8:7:4:1), so 30 slots give 12:11:6:1.
    assert counts == {"record_vectors": 12, "tags": 11, "window_vectors": 6, "fulltext": 1}


def test_record_already_placed_is_skipped_without_using_a_slot() -> None:
    lists = {
        "record_vectors": [Candidate(1, 0.1), Candidate(2, 0.2)],
        "tags": [Candidate(1, 0.1), Candidate(3, 0.3)],
    }
    merged = interleave(lists, SEED_WEIGHTS)
    assert [(p.record_id, p.placed_by) for p in merged] == [(1, "record_vectors"), (3, "tags"), (2, "record_vectors")]


def test_exhausted_list_leaves_the_others_in_their_own_proportions() -> None:
    merged = interleave(
        disjoint_lists({"record_vectors": 2, "tags": 100, "window_vectors": 100, "fulltext": 100}),
        SEED_WEIGHTS,
        limit=62,
    )
    tail = [p.placed_by for p in merged[10:]]
    assert "record_vectors" not in tail
    share = {name: tail.count(name) / len(tail) for name in ("tags", "window_vectors", "fulltext")}
    assert abs(share["tags"] - 35 / 60) < 0.05
    assert abs(share["window_vectors"] - 20 / 60) < 0.05
    assert abs(share["fulltext"] - 5 / 60) < 0.05


@settings(max_examples=300)
@given(lists_strategy)
def test_every_candidate_appears_exactly_once(lists: dict[str, list[Candidate]]) -> None:
    merged = interleave(lists, SEED_WEIGHTS)
    ids = [p.record_id for p in merged]
    assert len(ids) == len(set(ids))
    assert set(ids) == {c.record_id for candidates in lists.values() for c in candidates}


@settings(max_examples=300)
@given(lists_strategy, st.integers(min_value=1, max_value=17))
def test_pages_concatenated_equal_the_merged_list(lists: dict[str, list[Candidate]], page_size: int) -> None:
    whole = interleave(lists, SEED_WEIGHTS)
    pages = []
    page = 1
    while True:
        cut = interleave(lists, SEED_WEIGHTS, limit=page * page_size)[(page - 1) * page_size :]
        if not cut:
            break
        pages.extend(cut)
        page += 1
    assert pages == whole


@settings(max_examples=300)
@given(lists_strategy)
def test_order_within_each_list_is_preserved(lists: dict[str, list[Candidate]]) -> None:
    merged = interleave(lists, SEED_WEIGHTS)
    for name, candidates in lists.items():
        placed = [p.record_id for p in merged if p.placed_by == name]
        positions = [next(i for i, c in enumerate(candidates) if c.record_id == r) for r in placed]
        assert positions == sorted(positions)


@settings(max_examples=200)
@given(st.fixed_dictionaries({name: st.integers(min_value=1, max_value=80) for name in SEED_WEIGHTS}))
def test_each_share_of_any_prefix_follows_the_weights_within_one_slot(sizes: dict[str, int]) -> None:
    merged = interleave(disjoint_lists(sizes), SEED_WEIGHTS)
    total_weight = sum(SEED_WEIGHTS.values())
    counts = dict.fromkeys(SEED_WEIGHTS, 0)
    for n, place in enumerate(merged, start=1):
        counts[place.placed_by] += 1
        if any(counts[name] == sizes[name] for name in SEED_WEIGHTS):
            break  # a list is exhausted from here on: the proportions change by design
        for name, weight in SEED_WEIGHTS.items():
            assert abs(counts[name] - n * weight / total_weight) <= 1


class Watched:
    """A list that records how far the merge read it."""

    def __init__(self, candidates: list[Candidate]) -> None:
        self.candidates = candidates
        self.furthest = -1

    def __getitem__(self, index: int) -> Candidate:
        self.furthest = max(self.furthest, index)
        return self.candidates[index]


def test_a_list_is_read_only_as_far_as_the_page_needs() -> None:
    """A list may fetch its candidates as the merge reaches them: a page of 11 reads each list at
    most one past its last placed candidate (to see that it holds another), never to its end."""
    lists = {name: Watched(candidates) for name, candidates in disjoint_lists(dict.fromkeys(SEED_WEIGHTS, 500)).items()}
    merged = interleave(lists, SEED_WEIGHTS, limit=11)
    placed = {name: sum(p.placed_by == name for p in merged) for name in SEED_WEIGHTS}
    assert placed == {"record_vectors": 4, "tags": 4, "window_vectors": 2, "fulltext": 1}
    for name, watched in lists.items():
        assert placed[name] - 1 <= watched.furthest <= placed[name], name


def test_a_long_merge_lets_the_server_act_on_a_cancel_every_thousand_places() -> None:
    ticks: list[int] = []
    merged = interleave(disjoint_lists({"tags": 2_500}), {"tags": 1.0}, tick=lambda: ticks.append(len(ticks)))
    assert len(merged) == 2_500 and len(ticks) == 2_500 // TICK_EVERY == 2


def test_exact_heads_come_first_in_tie_order_then_the_round_robin_resumes_past_them() -> None:
    lists = disjoint_lists(dict.fromkeys(SEED_WEIGHTS, 50))
    lists["fulltext"][1] = Candidate(lists["tags"][0].record_id, 0.5)  # a head's record held by another head
    heads = {"fulltext": 3, "tags": 2}
    merged = interleave(lists, SEED_WEIGHTS, limit=15, heads=heads)
    # The heads in the lookups' tie order (tags before fulltext), a record already placed skipped.
    assert [(p.placed_by, p.record_id) for p in merged[:4]] == [
        ("tags", lists["tags"][0].record_id),
        ("tags", lists["tags"][1].record_id),
        ("fulltext", lists["fulltext"][0].record_id),
        ("fulltext", lists["fulltext"][2].record_id),
    ]
    # Then the seed's rhythm from fresh credits, each list past its head.
    assert "".join(LOOKUP_LETTERS[p.placed_by] for p in merged[4:]) == "VTWVTVTWVTF"
    assert merged[5].record_id == lists["tags"][2].record_id
    assert merged[14].record_id == lists["fulltext"][3].record_id


def test_exact_heads_never_pass_the_limit() -> None:
    lists = disjoint_lists(dict.fromkeys(SEED_WEIGHTS, 50))
    merged = interleave(lists, SEED_WEIGHTS, limit=2, heads={"tags": 5})
    assert [p.record_id for p in merged] == [c.record_id for c in lists["tags"][:2]]
