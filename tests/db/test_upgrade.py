"""Releases and upgrades: `ALTER EXTENSION emem UPDATE` from every shipped release gives the
catalog of a fresh install, user data survives it, an upgrade leaves the database writable
whatever ids an older release let in, the shipped scripts are those of the manifest and pass
pgspot, and each release's modules serve its own SQL.

The machinery is generic: every upgrade script (shipped in sql/releases/, or built into build/ for
this version) is tested by installing its start (CREATE EXTENSION ... VERSION: PostgreSQL installs
0.1.0 and follows the shipped upgrade scripts), updating, and comparing the catalog with a fresh
install. Releases before 0.3.0 run the modules of release 0.2.1 (installed as emem_db); the
session that writes data under an earlier one tells them to answer for it (emulate_modules_of).
Dump and restore are covered by test_dump.py."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import figures
import psycopg
import pytest
from derived import derived_mismatch
from psycopg import sql
from queries import scalar
from releases import (
    BUILD,
    CURRENT,
    RELEASES,
    ROOT,
    SQL,
    catalog,
    catalog_differences,
    check_installed,
    describe,
    emulate_modules_of,
    manifest,
    pgspot_allowances,
    require_legacy_modules,
    scratch_database,
    shipped_releases,
    upgrade_scripts,
)

pytest_plugins = ["figures"]

UPGRADES = [pytest.param(ab, id=f"{ab[0]}->{ab[1]}") for ab in upgrade_scripts()]
OLD_RELEASES = [pytest.param(v, id=v) for v in shipped_releases() if v != CURRENT]


def test_catalog_of_two_fresh_installs_is_the_same(db: psycopg.Connection) -> None:
    with scratch_database(db, "fresh") as fresh:
        fresh.execute("create extension emem cascade")
        differences = catalog_differences(catalog(db), catalog(fresh))
    assert not differences, describe(differences)
    assert all(catalog(db)[name] for name in ("functions", "relations", "columns", "indexes", "policies"))


CHANGES = [
    (
        "functions",
        "create or replace function emem._normal_tag(tag text) returns text language sql immutable strict"
        " set search_path = pg_catalog, pg_temp as $$ select pg_catalog.lower(tag) $$",
    ),
    ("functions", "alter function emem.readable_lanes() reset search_path"),
    (
        "functions",
        "revoke execute on function emem.e_timeline(timestamptz, timestamptz, integer, integer, text[],"
        " text[]) from public",
    ),
    ("columns", "alter table emem.lanes add column note text"),
    ("columns", "alter table emem.records alter column authority set default 0.7"),
    ("indexes", "create index lanes_by_time on emem.lanes (created_at)"),
    ("constraints", "alter table emem.records drop constraint content_size"),
    ("policies", "drop policy readable_lane on emem.windows"),
    ("relations", "revoke select on emem.embedding_spaces from public"),
    ("relations", "comment on table emem.records is 'changed'"),
    ("relations", "alter table emem.edges disable row level security"),
    (
        "triggers",
        "create trigger lanes_unchanged before update on emem.lanes"
        " for each row execute function pg_catalog.suppress_redundant_updates_trigger()",
    ),
    ("views", "a condition added to emem.record_summaries"),
    ("members", "alter extension emem drop function emem._normal_tag(text)"),
    ("extension", "select pg_catalog.pg_extension_config_dump('emem.lanes', 'where false')"),
]


@pytest.mark.parametrize(("category", "change"), CHANGES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CHANGES)])
def test_catalog_comparison_notices_a_change(db: psycopg.Connection, category: str, change: str) -> None:
    """The comparison can fail: each kind of change an upgrade script could get wrong shows up."""
    before = catalog(db)
    if category == "extension":
        # pg_extension_config_dump only runs inside an extension script: change the row directly.
        db.execute(
            "update pg_extension set extcondition = array_replace(extcondition, '', 'where false')"
            " where extname = 'emem'"
        )
    elif category == "views":
        definition = scalar(db, "select pg_get_viewdef('emem.record_summaries')").rstrip().rstrip(";")
        db.execute(
            f"create or replace view emem.record_summaries with (security_invoker = true) as {definition}"
            " where r.record_id > 0"
        )
    else:
        db.execute(change)
    differences = catalog_differences(before, catalog(db))
    assert category in differences, f"{change!r} changed {sorted(differences)} but not {category}"


# ---- the upgrades -----------------------------------------------------------------------------------------


def fill(conn: psycopg.Connection) -> None:
    """User data through the write API every release has had."""
    conn.execute("select emem.create_lane('sales'), emem.create_lane('hr')")
    conn.execute("select emem.create_agent_profile('clerk', array['sales'])")
    conn.execute("select emem.create_embedding_space('m', 3, 'fp', true)")
    items: list[dict[str, object]] = [
        {
            "kind": "note",
            "content": f"INV-2031 apollo note {i}",
            "lane": "sales" if i % 2 else "hr",
            "tags": ["apollo", f"t{i}"],
            "vector": [1, i, 0],
            "source_key": f"note-{i}",
            "metadata": {"i": i},
        }
        for i in range(6)
    ]
    items += [
        {
            "kind": "conversation",
            "content": f"turn {i}",
            "lane": "sales",
            "thread_id": "c",
            "thread_position": i,
            "vector": [0, 1, i],
        }
        for i in range(3)
    ]
    ids = [r[0] for r in conn.execute("select record_id from emem.put_records(%s::jsonb)", (json.dumps(items),))]
    conn.execute("select emem.put_window(%s, '[1,1,1]')", (ids[6:9],))
    conn.execute("select emem.link_records(%s, %s, 'billed', '{\"invoice\": \"INV-9\"}')", (ids[0], ids[1]))


def user_rows(conn: psycopg.Connection, tables: list[str]) -> dict[str, list[dict[str, object]]]:
    """Every row of the tables that hold user data, with the columns they have now."""
    return {
        t: scalar(conn, f"select coalesce(jsonb_agg(to_jsonb(x) order by to_jsonb(x)::text), '[]') from {t} as x")
        for t in tables
    }


BASE_TABLES = [
    "emem.lanes",
    "emem.agent_profiles",
    "emem.profile_lanes",
    "emem.embedding_spaces",
    "emem.records",
    "emem.record_tags",
    "emem.edges",
    "emem.record_vectors",
    "emem.windows",
    "emem.window_members",
]


@pytest.mark.parametrize("path", UPGRADES)
def test_update_gives_the_catalog_of_a_fresh_install(db: psycopg.Connection, path: tuple[str, str]) -> None:
    old, new = path
    check_installed(db, upgrade_scripts()[path])
    with scratch_database(db, "updated") as updated, scratch_database(db, "fresh") as fresh:
        updated.execute(sql.SQL("create extension emem version {} cascade").format(old))
        updated.execute(sql.SQL("alter extension emem update to {}").format(new))
        fresh.execute(sql.SQL("create extension emem version {} cascade").format(new))
        differences = catalog_differences(catalog(fresh), catalog(updated))
    assert not differences, f"{old} updated to {new} differs from a fresh {new} (- fresh, + updated):\n" + describe(
        differences
    )


@pytest.mark.parametrize("path", UPGRADES)
def test_user_data_survives_the_update(db: psycopg.Connection, path: tuple[str, str]) -> None:
    old, new = path
    require_legacy_modules(db)
    with scratch_database(db, "data") as conn:
        conn.execute(sql.SQL("create extension emem version {} cascade").format(old))
        emulate_modules_of(conn, old)
        fill(conn)
        before = user_rows(conn, BASE_TABLES)
        # The release's own find cannot run here (its SQL calls the modules it shipped with): what
        # a find of 'apollo' must answer after the update is every note tagged so.
        apollo = {r[0] for r in conn.execute("select record_id from emem.record_tags where tag = 'apollo'")}
        if new != CURRENT:
            emulate_modules_of(conn, new)  # an intermediate release's steps call the legacy modules as `new`
        conn.execute(sql.SQL("alter extension emem update to {}").format(new))
        info = conn.info
        with psycopg.connect(
            host=info.host, port=info.port, user=info.user, dbname=info.dbname, autocommit=True
        ) as after:  # a new session loads the modules of the new version
            columns_before = {t: set(rows[0]) if rows else set() for t, rows in before.items()}
            for table, rows in user_rows(after, BASE_TABLES).items():
                kept = [{k: v for k, v in row.items() if k in columns_before[table]} for row in rows]
                assert sorted(map(repr, kept)) == sorted(map(repr, before[table])), f"{table} changed in the update"
                figures.add("records checked", len(rows), detail=f"update {old}->{new}")
            if new == CURRENT:  # an intermediate release's find needs the modules it shipped with
                envelope = scalar(after, "select emem.e_gather_find_envelope('apollo', null, 1, 100)")
                assert {r["record_id"] for r in envelope["rows"]} == apollo
                assert derived_mismatch(after) == []
            after.execute("select emem.put_record('note', 'written after the update', 'sales', array['apollo'])")


def test_an_update_leaves_every_lane_writable_whatever_ids_an_older_release_let_in(db: psycopg.Connection) -> None:
    """0.1.1 let the owner write rows with ids of their own (here a record far past its sequence):
    after the updates to this version every lane still writes, and the planted record stays."""
    require_legacy_modules(db)
    with scratch_database(db, "planted") as conn:
        conn.execute("create extension emem version '0.1.1' cascade")
        emulate_modules_of(conn, "0.1.1")
        fill(conn)
        conn.execute(
            "insert into emem.records (record_id, kind, content, lane_name) values (403, 'note', 'planted', 'hr')"
        )
        emulate_modules_of(conn, "0.2.1")
        conn.execute("alter extension emem update to '0.2.1'")
        conn.execute("alter extension emem update")
        info = conn.info
        with psycopg.connect(
            host=info.host, port=info.port, user=info.user, dbname=info.dbname, autocommit=True
        ) as after:
            items = [
                {"kind": "note", "content": f"new {i}", "lane": lane} for i in range(250) for lane in ("sales", "hr")
            ]
            written = scalar(after, "select count(*) from emem.put_records(%s)", (json.dumps(items),))
            assert written == 500
            assert scalar(after, "select content from emem.records where record_id = 403") == "planted"


@pytest.mark.parametrize("release", OLD_RELEASES)
def test_every_shipped_release_updates_to_the_current_version(db: psycopg.Connection, release: str) -> None:
    with scratch_database(db, "chain") as updated, scratch_database(db, "fresh") as fresh:
        updated.execute(sql.SQL("create extension emem version {} cascade").format(release))
        updated.execute("alter extension emem update")
        assert scalar(updated, "select extversion from pg_extension where extname = 'emem'") == CURRENT
        fresh.execute("create extension emem cascade")
        differences = catalog_differences(catalog(fresh), catalog(updated))
    assert not differences, describe(differences)


def test_a_released_version_never_changes() -> None:
    """Once a version ships (make freeze), the install script built for it stays as its manifest
    line says: a change needs a new version and an upgrade script."""
    lines = [line for line in manifest() if line["version"] == CURRENT and line["kind"] == "install"]
    if not lines:
        pytest.skip(
            f"{CURRENT} is not released (no install line in sql/releases/MANIFEST): its script may still change"
        )
    built = BUILD / lines[0]["file"]
    assert hashlib.sha256(built.read_bytes()).hexdigest() == lines[0]["sha256"], (
        f"the sources of released version {CURRENT} changed: bump the version"
    )


def test_every_shipped_script_is_the_one_its_manifest_names() -> None:
    """sql/releases/MANIFEST records every script a release shipped, append-only: each kept in
    sql/releases/ matches its hash, and none is kept without its line."""
    lines = {line["file"]: line for line in manifest() if line["kind"] != "modules"}
    for path in RELEASES.glob("emem--*.sql"):
        assert path.name in lines, f"{path.relative_to(ROOT)} has no line in sql/releases/MANIFEST"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == lines[path.name]["sha256"], path.name
    versions = [line["version"] for line in manifest()]
    assert versions == sorted(versions, key=lambda v: tuple(int(p) for p in v.split("."))), (
        "the manifest is appended in order"
    )


def test_the_scripts_not_kept_are_in_git_at_their_commit() -> None:
    """A shipped script no longer kept in sql/releases/ (an install script PostgreSQL reaches through
    the upgrade scripts) is in git at the commit its line names, with its hash."""
    if shutil.which("git") is None or subprocess.run(["git", "-C", ROOT, "rev-parse"], capture_output=True).returncode:
        pytest.skip("no git checkout here")
    for line in manifest():
        if line["kind"] == "modules" or (RELEASES / line["file"]).exists():
            continue
        shown = subprocess.run(
            ["git", "-C", ROOT, "show", f"{line['commit']}:sql/releases/{line['file']}"], capture_output=True
        )
        assert shown.returncode == 0, f"{line['file']} is not in git at {line['commit']}"
        assert hashlib.sha256(shown.stdout).hexdigest() == line["sha256"], line["file"]


def test_every_script_passes_pgspot() -> None:
    """The install script and every upgrade script into this version: no search_path or SECURITY
    DEFINER mistakes (pgspot, as pgai lints its SQL)."""
    scripts = [BUILD / f"emem--{CURRENT}.sql", *BUILD.glob(f"emem--*--{CURRENT}.sql")]
    for script in scripts:
        found = subprocess.run(
            [
                str(Path(sys.executable).with_name("pgspot")),
                "--ignore-lang",
                "plpython3u",
                *pgspot_allowances(),
                str(script),
            ],
            capture_output=True,
            text=True,
        )
        assert found.returncode == 0, f"pgspot on {script.name}:\n{found.stdout}{found.stderr}"


@pytest.mark.parametrize("step", sorted((SQL / "upgrade").glob(f"emem--*--{CURRENT}.sql")), ids=lambda p: p.name)
def test_an_upgrade_is_the_prologue_its_step_and_the_code(step: Path) -> None:
    """An upgrade drops the old code (found in the catalog), changes the tables, creates the code
    exactly as a fresh install does, then fills what needs it (make: build/)."""
    code = "".join(p.read_text() for p in sorted(SQL.glob("[2-9][0-9]_*.sql")))
    after = step.with_name(step.name.replace(".sql", ".after.sql"))
    expected = (SQL / "upgrade" / "prologue.sql").read_text() + step.read_text() + code
    expected += after.read_text() if after.exists() else ""
    built = (BUILD / step.name).read_text()
    assert built == expected.replace("@EXTVERSION@", CURRENT).replace(
        "@MODULE@", "emem_db_" + CURRENT.replace(".", "_")
    )


def test_a_server_serves_each_database_the_modules_of_its_release(db: psycopg.Connection) -> None:
    """Each release installs its in-database package under a name of its own: a database still at
    0.2.1 and one at this version answer finds side by side on one server, in one session each."""
    require_legacy_modules(db)
    with scratch_database(db, "old") as old, scratch_database(db, "new") as new:
        old.execute("create extension emem version '0.2.1' cascade")
        new.execute("create extension emem cascade")
        for conn in (old, new):
            fill(conn)
        for conn, version in ((old, "0.2.1"), (new, CURRENT)):
            envelope = scalar(conn, "select emem.e_gather_find_envelope('apollo', null)")
            assert len(envelope["rows"]) == 6, version
