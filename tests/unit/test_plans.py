"""The lookups' plans are pure functions of the facts their statements gathered and the request's
mode: which kind of list each reads, and which broad parts it reads in tiers (no server)."""

import pytest

from emem_db.lists.base import Size
from emem_db.lookups.edges import EdgeMatch
from emem_db.lookups.fulltext import plan_scored_text
from emem_db.lookups.tags import TagMatch, broad_parts, plan_tags
from emem_db.plans import ListPlan, Mode

NO_EDGES = EdgeMatch([], [], [], [], namespaced=True)
BROAD_EDGE = EdgeMatch([], [], ["paid"], [Size(5_000)], namespaced=False, broad_labels=[["paid"]], labels=["paid"])


def mode(by_score: bool = True, degraded: bool = True, max_broad_parts: int = 5) -> Mode:
    return Mode(by_score, degraded, exact_limit=2_000, max_broad_parts=max_broad_parts)


def tags(*counts: int, edges: EdgeMatch = NO_EDGES) -> TagMatch:
    return TagMatch([f"tag{n}" for n in range(len(counts))], list(counts), edges)


@pytest.mark.parametrize(
    ("match", "request_mode", "kind"),
    [
        (tags(), mode(), "whole"),
        (tags(120, 40), mode(), "whole"),
        (tags(120_000), mode(by_score=False, degraded=False), "broad"),
        (tags(120_000), mode(), "broad"),
        (tags(120_000, 40), mode(), "tiered"),
        (tags(120_000, 5_000, 40), mode(), "tiered"),
        (tags(40, edges=BROAD_EDGE), mode(), "tiered"),
        (tags(120_000, 40), mode(by_score=False, degraded=False), "broad"),
    ],
    ids=["nothing", "narrow", "by distance", "one broad tag", "broad and narrow", "two broad", "edge", "seed vector"],
)
def test_the_kind_of_list_follows_the_sizes_and_the_order(match: TagMatch, request_mode: Mode, kind: str) -> None:
    assert plan_tags(match, request_mode).kind == kind


def test_a_tiered_plan_keeps_the_largest_broad_tags_within_the_parts_allowed() -> None:
    """With a broad edge term each broad tag brings two parts; the smallest goes first."""
    match = tags(300_000, 200_000, 100_000, 40, edges=BROAD_EDGE)
    plan = plan_tags(match, mode(max_broad_parts=5))
    assert (plan.kind, plan.broad) == ("tiered", ("tag0", "tag1"))
    assert broad_parts(match, list(plan.broad)) == 5


def test_more_broad_parts_than_allowed_are_read_whole() -> None:
    match = tags(40, edges=EdgeMatch([], [], ["a", "b", "c"], [Size(9_000)] * 3, False, [["a"], ["b"], ["c"]]))
    assert plan_tags(match, mode(max_broad_parts=2)) == ListPlan("whole", "3 broad parts (at most 2 are read in tiers)")


def test_scored_text_reads_its_broad_terms_in_tiers() -> None:
    assert plan_scored_text([], mode()).kind == "empty"
    assert plan_scored_text([10, 1_999], mode()).kind == "whole"
    plan = plan_scored_text([10, 50_000, 1_999, 80_000], mode())
    assert (plan.kind, plan.broad) == ("tiered", ("1", "3"))
    assert plan_scored_text([50_000] * 6, mode()).kind == "whole"


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown list kind"):
        ListPlan("sorted", "no such list")
