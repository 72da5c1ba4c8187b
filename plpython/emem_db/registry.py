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
from .lookups import fulltext, links, neighbours, tags, threads, vectors
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
    # Whether the merge places the list's exact head before the round-robin: its leading records
    # that share its top score, when they are few (Tuning.exact_head_limit). For a list ordered by
    # what exact lookups match (all of a label's terms, an edge naming the record, a rare code or
    # name), a narrow top is what the question asks for; weighted slots would cede it to vectors.
    exact_head: bool = False


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
        " records matching as many through tags), then by distance; its exact head is placed first",
        functools.partial(tags.visible_members, namespaced=False),
        exact_head=True,
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
        "linked_records", "linked", 20, False, False, links.linked_records,
        "the records linked by an edge (either direction) to a record holding a rare question term (a code,"
        " a figure, a rare name); by that term's rarity, then distance",
        links.visible_members,
    ),
    Lookup(
        "neighbours_of_hits", "neighbours", 20, False, False, neighbours.neighbours_of_hits,
        "the conversation turns or file chunks nearest by meaning to a record in no thread holding a rare"
        " question term; by that term's rarity, then nearness to that record, then distance",
        neighbours.visible_members,
    ),
    Lookup(
        "fulltext", "fulltext", 5, False, True, fulltext.fulltext,
        "records whose text holds a question term WordNet does not know (names, codes, figures); by distance",
    ),
    Lookup(
        "fulltext_by_rarity", "rare terms", 5, False, False, fulltext.fulltext_by_rarity,
        "as fulltext, ordered by the summed rarity (IDF) of the terms matched first, then by distance;"
        " its exact head is placed first",
        exact_head=True,
    ),
    Lookup(
        "fulltext_words", "words", 5, False, False, fulltext.fulltext_words,
        "records whose text holds any telling content word of the question; by summed IDF, then distance",
    ),
)  # fmt: skip

BY_NAME: dict[str, Lookup] = {lookup.name: lookup for lookup in LOOKUPS}
SEED_WEIGHTS: dict[str, float] = {lookup.name: lookup.default_weight for lookup in LOOKUPS if lookup.in_seed_profile}
SEED_PROFILE = ", ".join(SEED_WEIGHTS)
