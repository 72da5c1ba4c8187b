"""Install and drop: the extension, its schema, and what pg_dump keeps."""

import psycopg


def test_create_extension_installs_into_schema_emem(db: psycopg.Connection) -> None:
    row = db.execute(
        "select n.nspname, e.extversion, e.extrelocatable from pg_extension e"
        " join pg_namespace n on n.oid = e.extnamespace where e.extname = 'emem'"
    ).fetchone()
    assert row[0] == "emem"
    assert row[2] is False


def test_drop_extension_removes_everything(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('sales')")
    db.execute("drop extension emem")
    assert db.execute("select count(*) from pg_namespace where nspname = 'emem'").fetchone()[0] in (0, 1)
    assert (
        db.execute(
            "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'emem'"
        ).fetchone()[0]
        == 0
    )
    assert (
        db.execute(
            "select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'emem'"
        ).fetchone()[0]
        == 0
    )
