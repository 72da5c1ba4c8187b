"""On one node the HNSW scans set pgvector's settings around their statement (hnsw.ef_search at
least the candidates asked for, an iterative scan when the scan keeps to some lanes) and put the
caller's values back; the scans return what the settings let them (a Citus cluster's path is
tests/db/test_citus.py's)."""

import psycopg
import pytest
import writes
from databases import MakeRole
from finds import envelope
from vectors import unit


def two_lanes(db: psycopg.Connection, make_role: MakeRole) -> None:
    """Lanes own and other, 60 records with vectors in each, the other lane's nearer the question."""
    db.execute("select emem.create_lane('own'), emem.create_lane('other')")
    db.execute("select emem.create_embedding_space('hand-made', 4, null, true)")
    db.execute("select emem.create_agent_profile('own_reader', array['own'])")
    db.execute("select emem.set_agent_setting('own_reader', 'emem.lane_isolation', 'strict')")
    writes.put(db, [{"content": f"other {i}", "vector": unit(1, 0.001 * i, 0, 0)} for i in range(60)], lane="other")
    writes.put(db, [{"content": f"own {i}", "vector": unit(1, 0.5 + 0.01 * i, 0, 0)} for i in range(60)], lane="own")


pytestmark = pytest.mark.corpus(two_lanes, read_only=False)

SETTINGS = "select current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')"


@pytest.mark.parametrize("who", ["owner", "strict agent"])
def test_a_find_puts_the_callers_pgvector_settings_back(db: psycopg.Connection, make_role: MakeRole, who: str) -> None:
    if who == "strict agent":
        db.execute(f"set role {make_role('own_agent', 'own_reader')}")
    db.execute("set enable_seqscan = off; set enable_bitmapscan = off")  # the HNSW index, not an exact sort
    db.execute("set hnsw.ef_search = 7")  # below the 100 record vectors a find asks for
    try:
        found = envelope(db, "nothing in words", "[1,0,0,0]")
        assert db.execute(SETTINGS).fetchone() == ("7", "off")
    finally:
        db.execute("reset role")
    vector_ranked = [row for row in found["rows"] if row["placed_by"] == "record_vectors"]
    # ef_search 7 would return 7 rows; the scan ran with at least 100, and the strict agent's scan
    # went on past the other lane's nearer vectors (an iterative scan) to a full page of its own.
    assert len(vector_ranked) == 30
    if who == "strict agent":
        assert {row["lane"] for row in found["rows"]} == {"own"}
