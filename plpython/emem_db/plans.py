"""What a lookup decided to read, as plain data: the kind of list, why, and what it reads in tiers.

Each lookup gathers the facts it decides on (matched tags with their counts, matched edge labels
with their ends counted up to a limit, terms with their document frequencies) with its statements,
then a pure function of those facts and the request's mode (with a vector or degraded, the order,
the limits of Tuning) makes its ListPlan; the list is built from the plan. e_gather_explain shows
each lookup's plan, the shape of the list built from it (lists' describe()) and the statements it
ran (Reader.log).
"""

from dataclasses import dataclass
from typing import Any

# The kinds of list a plan may choose (lists/): nothing to read; every candidate fetched with its
# distance (by distance) or with its score (by score first); a match read lazily (by distance, or
# degraded in record-id order); a match read in tiers by score.
KINDS = ("empty", "whole", "broad", "tiered")
# Larger than any match: on a Citus cluster every match is read whole (Reader.exact_limit).
WHOLE_ON_A_CLUSTER = 2**62


def read_whole_because(limit: int, reason: str) -> str:
    """Why a match is read whole: `reason`, or on a cluster (the limit is WHOLE_ON_A_CLUSTER) that."""
    return "a Citus cluster reads every match whole" if limit >= WHOLE_ON_A_CLUSTER else reason


@dataclass(frozen=True)
class Mode:
    """What a plan depends on beside the facts: the list's order, whether there is a vector, and
    how large a match may be to be read whole (Reader.exact_limit, probed_limit) and into how many
    broad parts a tiered list may split (Tuning.max_broad_parts)."""

    by_score: bool
    degraded: bool
    exact_limit: int
    max_broad_parts: int

    @property
    def scored(self) -> bool:
        """Whether the list is ordered by a score first (else by distance alone)."""
        return self.by_score or self.degraded


@dataclass(frozen=True)
class ListPlan:
    kind: str
    reason: str
    # tiered: the broad tags (or the indexes of the broad terms) read in tiers
    broad: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown list kind {self.kind!r}")

    def shown(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, **({"broad": list(self.broad)} if self.broad else {})}
