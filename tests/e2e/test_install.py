"""Install and drop: the extension, its schema, and what pg_dump keeps."""

import psycopg
from queries import row, scalar


def test_create_extension_installs_into_schema_emem(db: psycopg.Connection) -> None:
    installed = row(
        db,
        "select n.nspname, e.extversion, e.extrelocatable from pg_extension e"
        " join pg_namespace n on n.oid = e.extnamespace where e.extname = 'emem'",
    )
    assert installed[0] == "emem"
    assert installed[2] is False


def test_drop_extension_removes_everything(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('sales')")
    db.execute("drop extension emem")
    assert scalar(db, "select count(*) from pg_namespace where nspname = 'emem'") in (0, 1)
    assert (
        scalar(
            db, "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'emem'"
        )
        == 0
    )
    assert (
        scalar(
            db, "select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'emem'"
        )
        == 0
    )
