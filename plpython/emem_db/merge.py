"""The merge: each lookup's list, sorted by distance, interleaved by smooth weighted round-robin.

First, in the lookups' tie order, each list places its exact head, if it has one (`heads`: how
many of its leading candidates, see registry.Lookup.exact_head); the round-robin then resumes
every list past its head, its credits starting from nothing. Before each slot, every list that
still holds an unplaced record adds its weight to its credit; the list with the highest credit
(ties: the lookups' fixed order) places its next unplaced record and loses the sum of the
weights of the lists still running. A record already placed is
skipped and uses no slot; an exhausted list leaves the others going in their own proportions.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

TICK_EVERY = 1_000


@dataclass(frozen=True)
class Candidate:
    record_id: int
    distance: float | None
    windows: tuple[int, ...] = ()
    score: float | None = None  # what a list ordered by score first ranks by (matched terms, summed IDF)


class RankedList(Protocol):
    """What the merge needs of a list: the candidate at a position, IndexError past the end. A
    list may fetch its candidates as the merge reaches them."""

    def __getitem__(self, index: int, /) -> Candidate: ...


@dataclass(frozen=True)
class Placement:
    record_id: int
    placed_by: str
    candidate: Candidate


def interleave(
    lists: Mapping[str, RankedList],
    weights: Mapping[str, float],
    limit: int | None = None,
    tick: Callable[[], None] | None = None,
    heads: Mapping[str, int] | None = None,
) -> list[Placement]:
    """The merged list (its first `limit` places). `lists` iterates in the tie order; `tick` is
    called every TICK_EVERY places (a long merge lets the server act on a cancel)."""
    order = list(lists)
    next_index = dict.fromkeys(order, 0)
    credit = dict.fromkeys(order, 0.0)
    placed_ids: set[int] = set()
    merged: list[Placement] = []
    for name in order:
        next_index[name] = head = (heads or {}).get(name, 0)
        for candidate in (lists[name][index] for index in range(head)):
            if candidate.record_id not in placed_ids:
                placed_ids.add(candidate.record_id)
                merged.append(Placement(candidate.record_id, name, candidate))
    if limit is not None:
        del merged[limit:]
    while limit is None or len(merged) < limit:
        running = [name for name in order if _skip_placed(lists[name], next_index, name, placed_ids)]
        if not running:
            break
        for name in running:
            credit[name] += weights[name]
        chosen = max(running, key=credit.__getitem__)  # max keeps the first of equals: tie order
        credit[chosen] -= sum(weights[name] for name in running)
        candidate = lists[chosen][next_index[chosen]]
        next_index[chosen] += 1
        placed_ids.add(candidate.record_id)
        merged.append(Placement(candidate.record_id, chosen, candidate))
        if tick is not None and len(merged) % TICK_EVERY == 0:
            tick()
    return merged


def _skip_placed(candidates: RankedList, next_index: dict[str, int], name: str, placed_ids: set[int]) -> bool:
    """Advance a list past records already placed; whether it still holds an unplaced one.
    Lists are only indexed, never measured (IndexError marks their end)."""
    index = next_index[name]
    try:
        while candidates[index].record_id in placed_ids:
            index += 1
    except IndexError:
        return False
    finally:
        next_index[name] = index
    return True
