"""The lookups as set-based SQL over the extension's indexes, each a function of a Reader that
returns its CandidateList. The registry (emem_db.registry) names them.

Orders (ties are always broken by record id, ascending):
- with a question vector, every list by distance; a record without a vector in the active
  space counts as the worst distance, 2 (a placeholder);
- degraded (no vector), by relevance: tags and edges by the number of distinct question terms
  matched, most first, then a record an edge names, then the rarest tag matched; full text by
  the number of terms matched, most first, then BM25;
- the opt-in components: tags_by_terms by matched terms (edges above tags), then distance;
  fulltext_by_rarity and fulltext_words by the summed IDF of the terms matched, then distance
  (degraded: BM25); thread_context by the rarity of the exact hit a record lies near, then its
  steps from it, then distance; linked_records by the rarity of the exact hit a record is linked
  to by an edge, then distance; neighbours_of_hits by the rarity of the exact hit a turn or chunk
  is near by meaning, then its nearness to it, then distance.

A tag or full-text match larger than Reader.exact_limit (a broad tag or term) is not fetched
whole: its list is read from the HNSW index, filtered to the match, as far as the merge reaches
(lists.broad), and its size is counted (for tags, from the tag vocabulary's counts). A list
ordered by a score first reads the records of its broad tags or terms the same way, one tier per
combination of them (lists.tiered); the records it fetches whole come with their scores, and
their distances are fetched one score level at a time (lists.scored).
"""
