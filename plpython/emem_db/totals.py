"""How many distinct records the lists of a find hold together (total_candidates).

Lists fetched whole give their records; a broad match is counted in SQL, not read. One match is
counted by its size and what the other lists add to it; several by one union of their records
(a union hashes each record once, where probing one match for every record of another costs
several times more).
"""

from collections.abc import Iterable

from emem_db.lists.base import CandidateList
from emem_db.reader import Reader


def total_candidates(reader: Reader, lists: Iterable[CandidateList]) -> int:
    lists = list(lists)
    countings = [candidates.counting() for candidates in lists]
    counted = [(candidates, c.match) for candidates, c in zip(lists, countings, strict=True) if c.match is not None]
    at_hand = {record_id for c in countings if c.match is None for record_id in c.known_ids}
    if not counted:
        return len(at_hand)
    if len(counted) == 1:
        candidates, match = counted[0]
        outside = (
            "select pg_catalog.count(*) as n from pg_catalog.unnest($1::bigint[]) as id"
            f" where not ({match.holds('id')})"
        )
        return (
            candidates.size()
            + reader.execute(
                outside,
                ["bigint[]"],
                [list(at_hand)],
                cache=False,
            )[0]["n"]
        )
    at_hand.update(record_id for _, match in counted for record_id in match.known_ids)
    union = " union ".join(f"({match.ids_sql})" for _, match in counted)
    return reader.execute(
        f"select pg_catalog.count(*) as n from ({union} union select pg_catalog.unnest($1::bigint[])) as c",
        ["bigint[]"],
        [list(at_hand)],
        cache=False,
    )[0]["n"]
