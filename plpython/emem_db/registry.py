"""The lookups e_gather_find can run, one definition each, in the merge's tie order.

The one source of their names, default weights, tie order, whether they need a question vector,
the labels clients show, and the function that builds each list. The profile parser, the
merge, explain and the envelope read it here; clients read it through emem.lookup_registry()
and the envelope's `lookups`.
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass

from .lists.base import CandidateList
from .lookups import fulltext, tags, threads, vectors
from .reader import Reader


@dataclass(frozen=True)
class Lookup:
    name: str
    label: str
    default_weight: float
    needs_vector: bool
    in_seed_profile: bool
    build: Callable[[Reader], CandidateList]
    description: str
    # For a lookup that reaches records through edges: which of some records it holds for a
    # caller reading only some lanes (an edge carries the secrecy of both its ends).
    visible_members: Callable[[Reader, list[int], list[str]], set[int]] | None = None


# The seed's proportions are 40 : 35 : 20 : 5 (record vector : tag or edge property : window :
# full text); an opt-in component takes the weight of the seed lookup it refines and ties right
# after it.
LOOKUPS: tuple[Lookup, ...] = (
    Lookup(
        "record_vectors", "vector", 40, True, True, vectors.record_vectors,
        "the nearest record vectors of the active space",
    ),
    Lookup(
        "tags", "tags", 35, False, True, tags.tags,
        "records whose tags, or edges whose relation or properties, the question's words name; by distance",
        functools.partial(tags.visible_members, namespaced=True),
    ),
    Lookup(
        "tags_by_terms", "tags by terms", 35, False, False, tags.tags_by_terms,
        "as tags, ordered by the number of question terms matched first (a record an edge names above"
        " records matching as many through tags), then by distance",
        functools.partial(tags.visible_members, namespaced=False),
    ),
    Lookup(
        "window_vectors", "window", 20, True, True, vectors.window_vectors,
        "the nearest window vectors of the active space, each adding the records it was made from",
    ),
    Lookup(
        "thread_context", "thread", 20, False, False, threads.thread_context,
        "the turns or chunks of a thread around a record holding a question term telling of that thread"
        " (a code, a figure, a rare name; a name frequent in that thread but rare overall, with another"
        " question word); by that term's rarity, then nearness in the thread, then the record's other"
        " question words, then distance",
    ),
    Lookup(
        "fulltext", "fulltext", 5, False, True, fulltext.fulltext,
        "records whose text holds a question term WordNet does not know (names, codes, figures); by distance",
    ),
    Lookup(
        "fulltext_by_rarity", "rare terms", 5, False, False, fulltext.fulltext_by_rarity,
        "as fulltext, ordered by the summed rarity (IDF) of the terms matched first, then by distance",
    ),
    Lookup(
        "fulltext_words", "words", 5, False, False, fulltext.fulltext_words,
        "records whose text holds any telling content word of the question; by summed IDF, then distance",
    ),
)  # fmt: skip

BY_NAME: dict[str, Lookup] = {lookup.name: lookup for lookup in LOOKUPS}
SEED_WEIGHTS: dict[str, float] = {lookup.name: lookup.default_weight for lookup in LOOKUPS if lookup.in_seed_profile}
SEED_PROFILE = ", ".join(SEED_WEIGHTS)
