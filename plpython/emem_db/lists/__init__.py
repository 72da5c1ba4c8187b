"""Candidate lists: one lookup's candidates in the list's order, read as far as the merge asks.

Every kind answers the same questions through CandidateList (base.py): the candidate at a
position, what was read, the list's size, which of some records it holds, and what the totals
count. A list reads the database only through the Reader it was given.
- fetched.py: a list fetched whole;
- scored.py: ordered by a score first, its distances fetched one score level at a time;
- broad.py: a broad match (a common tag or term), read from a filtered HNSW scan or an index;
- tiered.py: ordered by a score first, its broad parts read in tiers.
"""
