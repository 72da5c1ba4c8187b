"""The measured constants that decide how the lookups read a match, in one place.

The figures behind them are in bench/README.md. A backend keeps one Tuning (entry.Backend.tuning).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    # A match of up to this many records is always fetched whole. With a vector the limit grows
    # with the space: a filtered HNSW scan visits about reach * records / size vectors to find
    # `reach` matches, each visit costing some ten times what an exact read pays per match, so the
    # two meet near size = sqrt(filtered_scan_cost_ratio * reach * records). Measured at 1M
    # records, page 1: a 3,000-record tag costs 16-23 ms read whole and 32-55 ms by the filtered
    # scan, a term on 17,700 records 100-145 ms and 45-300 ms, a tag on 120,000 records about
    # 720 ms and 10-35 ms.
    exact_candidates: int = 2_000
    filtered_scan_cost_ratio: float = 10
    # Degraded, a broad full-text or edge match is read in record-id order by probing records in
    # their primary key's order (reach * records / size of them), each probe some twice the cost
    # of a record of a whole read.
    degraded_probe_cost_ratio: float = 2
    # ef_search of the filtered scans: fixed, so that a longer fetch extends a shorter one.
    filtered_scan_ef_search: int = 100
    # A scored list with more broad tags or terms than this is read whole (2^n - 1 tiers otherwise, each
    # read only when the merge reaches its score).
    max_broad_parts: int = 5
    # A term's document frequency is counted up to this many records (a larger one says little).
    document_frequency_cap: int = 20_000
    # fulltext_words leaves out a word on more than this share of the records (and on at least
    # common_word_floor of them: a word on fewer records is cheap to search, however common).
    common_word_share: float = 0.05
    common_word_floor: int = 1_000
    # thread_context (lookups.threads): a term on at most anchor_frequency records makes its
    # records of a thread anchors (a code, a figure, a rare name). A term on more records, up to
    # thread_term_limit (no statement reads more than that many of its records), does so in a
    # thread whose share of its records is at least thread_share_lift times the thread's share of
    # all records (a friend's name on the turns of the one conversation she speaks in, not a word
    # on every thread's turns), for its records there that hold another word of the question; of
    # each such term, the anchor_threads threads holding most of its records are weighed. The
    # max_anchors most telling anchors bring their thread within thread_radius positions.
    # anchor_frequency, max_anchors and thread_radius were chosen with make eval EVAL_ARGS=--grid;
    # the other three are set by hand and measured on the sessions and records corpora
    # (docs/evaluation.md: a conversation's names are telling at any lift up to 4 there).
    # Of a long question, the first thread_terms names and thread_terms other words are weighed
    # (each telling term costs a read of its own; a 10,000-character question holds 1,600).
    anchor_frequency: int = 20
    thread_terms: int = 16
    thread_term_limit: int = 2_000
    thread_share_lift: float = 2
    anchor_threads: int = 3
    max_anchors: int = 10
    thread_radius: int = 3
    # A list of an exact_head lookup (registry) whose top score is held by at most this many
    # records places them first in the merge: a code on 2 records, the deal both a client's name
    # and `won` name; not a tag of 40 records. Chosen with make eval: exact_first's R@10 on the
    # own corpus .955 with 5, .967 with 10, .942 with 20 (20 lets speakers' turns crowd the page).
    exact_head_limit: int = 10
    # linked_records (lookups.links): a term on at most link_anchor_frequency records makes its
    # records anchors when they end an edge (a code, a figure, a person's full name; not a vendor's
    # name on each of its invoices, whose links are those of a crowd); the max_anchors most telling
    # bring at most max_linked records at the other end of their edges (an entity on many edges
    # brings its nearest links). Chosen with make eval: 5 keeps the records corpus's gains (its
    # keys are on 1 to 3 records) and the own corpus's vendor questions (a name on 11) unchanged.
    link_anchor_frequency: int = 5
    max_linked: int = 200
    # A relation named with stop words only (`about`) counts where the tags the question matches
    # hold at most grammar_tag_records records, and its edges at them are at most as many (a
    # precise name, lookups.edges.grammar_edges): a figure of meaning, apart from exact_candidates,
    # so that tuning how matches are read leaves the answers as they are.
    grammar_tag_records: int = 2_000
    # Of a hub anchor (an entity on 100,000 edges), its first max_anchor_links links by record id
    # are measured: a distance each is what a find pays.
    max_anchor_links: int = 2_000
    # neighbours_of_hits (lookups.neighbours): the neighbour_anchors most telling anchors (as
    # linked_records', in no thread, with a vector) each bring the nearest neighbours_per_anchor
    # records in a thread among their neighbour_scan nearest records (one HNSW scan each).
    neighbour_anchors: int = 3
    neighbours_per_anchor: int = 10
    neighbour_scan: int = 300
    # Bounded totals: a list the column statistics alone put at this many times the bound passes it
    # (statistics lag behind writes, up to the 10% of a table autovacuum lets change before it
    # analyses again; the margin keeps the lower bound below the true total).
    estimated_totals_margin: float = 1.5


DEFAULT_TUNING = Tuning()
