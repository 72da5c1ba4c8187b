"""What the triggers must keep in edge_label_ends and edge_label_vocabulary, derived from the
edges themselves (shared by the tests of writes, the soak and the update)."""

import psycopg

# What edge_label_ends must hold: each label's ends with the number of its edges ending there.
EXPECTED_ENDS = """
    select l.label, ends.record_id, pg_catalog.count(*)::integer
    from emem.edge_labels as l
    join emem.edges as e on e.edge_id = l.edge_id
    cross join lateral (values (e.from_record_id), (e.to_record_id)) as ends (record_id)
    group by l.label, ends.record_id"""


def label_ends_mismatch(conn: psycopg.Connection) -> list[tuple]:
    """Rows in which edge_label_ends and the edges differ ('kept' or 'derived' first), and labels
    in use that the vocabulary lacks or spells with other terms ('vocabulary' first)."""
    kept = set(conn.execute("select label, record_id, edges from emem.edge_label_ends").fetchall())
    derived = set(conn.execute(EXPECTED_ENDS).fetchall())
    vocabulary = set(
        conn.execute(
            """select distinct l.label from emem.edge_labels as l
               where not exists (select from emem.edge_label_vocabulary as v
                                 where v.label = l.label and v.lane_name = coalesce(l.from_lane_name, '')
                                   and v.label_terms = l.label_terms
                                   and v.namespace_terms = l.namespace_terms)"""
        ).fetchall()
    )
    return (
        [("kept", *row) for row in kept - derived]
        + [("derived", *row) for row in derived - kept]
        + [("vocabulary", *row) for row in vocabulary]
    )
