"""Upgrades: `ALTER EXTENSION emem UPDATE` from an earlier release gives the
catalog of a fresh install, and user data survives it.

The machinery is generic: every upgrade script sql/emem--A--B.sql is tested by installing A from
its frozen install script (sql/releases/emem--A.sql, the script of release A exactly as shipped),
updating to B, and comparing the catalog with a fresh install of B; every frozen release must
reach the current version. Dump and restore are covered by test_dump.py.

Installing an old release runs its SQL with the PL/Python modules of the current build: the
modules check that their version matches the SQL's, so the session that writes data under A
tells the loaded modules to answer for A (emulate_modules_of). Data written that way is what the
current analyser makes of it; an upgrade that must recompute derived columns (tag_terms,
label_terms) cannot be checked here beyond their presence.
"""

import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import figures
import psycopg
import pytest
from edge_ends import label_ends_mismatch
from psycopg import sql

pytest_plugins = ["figures"]

ROOT = Path(__file__).resolve().parent.parent
SQL = ROOT / "sql"
RELEASES = SQL / "releases"
CURRENT = re.search(r"^default_version\s*=\s*'([^']+)'", (ROOT / "emem.control").read_text(), flags=re.MULTILINE).group(
    1
)


def version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"[.-]", version))


def upgrade_scripts() -> list[tuple[str, str]]:
    """(from, to) of every sql/emem--A--B.sql."""
    found = [re.fullmatch(r"emem--(.+)--(.+)\.sql", p.name) for p in SQL.glob("emem--*--*.sql")]
    return sorted(((m.group(1), m.group(2)) for m in found if m), key=lambda ab: tuple(map(version_key, ab)))


def frozen_releases() -> list[str]:
    found = [re.fullmatch(r"emem--(.+)\.sql", p.name) for p in RELEASES.glob("emem--*.sql")]
    return sorted((m.group(1) for m in found if m and "--" not in m.group(1)), key=version_key)


def missing(what: str) -> list:
    return [pytest.param(None, marks=pytest.mark.skip(reason=what), id="none")]


UPGRADES = [pytest.param(ab, id=f"{ab[0]}->{ab[1]}") for ab in upgrade_scripts()] or missing(
    f"no upgrade script sql/emem--A--B.sql yet: {CURRENT} is the only release. When a release ships, copy its "
    f"install script to {RELEASES.relative_to(ROOT)}/ and add sql/emem--<it>--<next>.sql with the next version"
)
OLD_RELEASES = [pytest.param(v, id=v) for v in frozen_releases() if v != CURRENT] or missing(
    f"no frozen release before {CURRENT} in {RELEASES.relative_to(ROOT)}/"
)


# ---- the catalog, as the extension defines it -------------------------------------------------------

RELATIONS = "(select oid from pg_catalog.pg_class where relnamespace = 'emem'::regnamespace)"
CATALOG = {
    "extension": """
        select e.extversion, e.extrelocatable, e.extnamespace::regnamespace::text, e.extowner::regrole::text,
               array(select c::regclass::text from unnest(e.extconfig) as c order by 1), e.extcondition
        from pg_extension e where e.extname = 'emem'""",
    "members": """
        select pg_describe_object(d.classid, d.objid, d.objsubid) from pg_depend d
        where d.refclassid = 'pg_extension'::regclass and d.deptype = 'e'
          and d.refobjid = (select oid from pg_extension where extname = 'emem')""",
    "schema": """
        select n.nspname, n.nspowner::regrole::text, n.nspacl::text, obj_description(n.oid, 'pg_namespace')
        from pg_namespace n where n.nspname = 'emem'""",
    "functions": """
        select p.oid::regprocedure::text, p.prokind, case when p.prokind <> 'a' then pg_get_functiondef(p.oid) end,
               p.proowner::regrole::text, p.proacl::text, obj_description(p.oid, 'pg_proc')
        from pg_proc p where p.pronamespace = 'emem'::regnamespace""",
    "aggregates": """
        select a.aggfnoid::regprocedure::text, a.aggtransfn::regprocedure::text, a.aggfinalfn::text,
               a.aggcombinefn::text, format_type(a.aggtranstype, null), a.agginitval
        from pg_aggregate a join pg_proc p on p.oid = a.aggfnoid where p.pronamespace = 'emem'::regnamespace""",
    "relations": """
        select c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.relforcerowsecurity,
               c.reloptions::text, c.relowner::regrole::text, c.relacl::text, obj_description(c.oid, 'pg_class')
        from pg_class c where c.relnamespace = 'emem'::regnamespace""",
    "columns": f"""
        select a.attrelid::regclass::text,
               row_number() over (partition by a.attrelid order by a.attnum), a.attname,
               format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attgenerated,
               a.attidentity, a.attcollation::regcollation::text, a.attacl::text,
               col_description(a.attrelid, a.attnum)
        from pg_attribute a left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
        where a.attrelid in {RELATIONS} and a.attnum > 0 and not a.attisdropped""",
    "views": """
        select c.relname, pg_get_viewdef(c.oid) from pg_class c
        where c.relnamespace = 'emem'::regnamespace and c.relkind in ('v', 'm')""",
    "indexes": f"select pg_get_indexdef(i.indexrelid) from pg_index i where i.indrelid in {RELATIONS}",
    "constraints": """
        select c.conrelid::regclass::text, c.contypid::regtype::text, c.conname, c.contype, pg_get_constraintdef(c.oid),
               obj_description(c.oid, 'pg_constraint')
        from pg_constraint c where c.connamespace = 'emem'::regnamespace""",
    "triggers": f"""
        select t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled from pg_trigger t
        where not t.tgisinternal and t.tgrelid in {RELATIONS}""",
    "policies": """
        select p.tablename, p.policyname, p.permissive, p.roles::text, p.cmd, p.qual, p.with_check
        from pg_policies p where p.schemaname = 'emem'""",
    "sequences": f"""
        select s.seqrelid::regclass::text, format_type(s.seqtypid, null), s.seqstart, s.seqincrement, s.seqmax,
               s.seqmin, s.seqcache, s.seqcycle
        from pg_sequence s where s.seqrelid in {RELATIONS}""",
    "types": """
        select t.typname, t.typtype, t.typowner::regrole::text, t.typacl::text, obj_description(t.oid, 'pg_type')
        from pg_type t where t.typnamespace = 'emem'::regnamespace""",
    "operators": """
        select o.oprname, format_type(o.oprleft, null), format_type(o.oprright, null), o.oprcode::text
        from pg_operator o where o.oprnamespace = 'emem'::regnamespace""",
    "casts": """
        select format_type(c.castsource, null), format_type(c.casttarget, null), c.castfunc::regprocedure::text,
               c.castcontext
        from pg_cast c join pg_type s on s.oid = c.castsource join pg_type t on t.oid = c.casttarget
        where 'emem'::regnamespace in (s.typnamespace, t.typnamespace)""",
    "text search": """
        select c.cfgname, c.cfgparser::regproc::text, obj_description(c.oid, 'pg_ts_config'),
               array(select m.maptokentype || ':' || m.mapseqno || ':' || m.mapdict::regdictionary::text
                     from pg_ts_config_map m where m.mapcfg = c.oid order by 1)
        from pg_ts_config c where c.cfgnamespace = 'emem'::regnamespace""",
    "default privileges": """
        select d.defaclrole::regrole::text, d.defaclobjtype, d.defaclacl::text from pg_default_acl d
        where d.defaclnamespace = 'emem'::regnamespace""",
}


def catalog(conn: psycopg.Connection) -> dict[str, list[str]]:
    """What the extension defines, free of OIDs and of the database it lives in."""
    return {name: sorted(repr(row) for row in conn.execute(query)) for name, query in CATALOG.items()}


def catalog_differences(left: dict[str, list[str]], right: dict[str, list[str]]) -> dict[str, list[str]]:
    differences = {}
    for name in CATALOG:
        only_left = sorted(set(left[name]) - set(right[name]))
        only_right = sorted(set(right[name]) - set(left[name]))
        if only_left or only_right or left[name] != right[name]:
            differences[name] = [f"- {row}" for row in only_left] + [f"+ {row}" for row in only_right]
    return differences


def describe(differences: dict[str, list[str]]) -> str:
    return "\n".join(f"{name}:\n  " + "\n  ".join(rows[:20]) for name, rows in differences.items())


# ---- databases and releases -----------------------------------------------------------------------------


@contextmanager
def scratch_database(db: psycopg.Connection, purpose: str) -> Iterator[psycopg.Connection]:
    """A new empty database (without emem) on the test server, dropped afterwards."""
    name = f"emem_{purpose}_{uuid.uuid4().hex[:8]}"
    db.execute(f"create database {name}")
    try:
        info = db.info
        with psycopg.connect(host=info.host, port=info.port, user=info.user, dbname=name, autocommit=True) as conn:
            conn.execute("set client_min_messages = warning")
            yield conn
    finally:
        db.execute(f"drop database {name} with (force)")


@contextmanager
def installable(db: psycopg.Connection, version: str) -> Iterator[None]:
    """Makes release `version` installable while the test runs: the current version as built, an
    earlier one from the server's extension directory when it holds it as shipped, else from the
    frozen script in sql/releases/."""
    available = {r[0] for r in db.execute("select version from pg_available_extension_versions where name = 'emem'")}
    if version == CURRENT:  # the version being built: installed by make install, frozen when it ships
        assert version in available, f"{version} is not installed on the server: run make install"
        yield
        return
    frozen = RELEASES / f"emem--{version}.sql"
    assert frozen.exists(), f"release {version} has no frozen install script {frozen.relative_to(ROOT)}"
    sharedir = Path(db.execute("select setting from pg_config where name = 'SHAREDIR'").fetchone()[0])
    target = sharedir / "extension" / frozen.name
    if target.exists():  # (listed as available also when an update path reaches it: check the file)
        assert target.read_text() == frozen.read_text(), (
            f"the server's {target} is not release {version} as shipped ({frozen.relative_to(ROOT)}): "
            "a stale install from an older checkout; remove it or copy the frozen script over it"
        )
        yield
        return
    if not os.access(target.parent, os.W_OK):
        pytest.skip(
            f"release {version} is not installed and {target.parent} is not writable: "
            f"install {frozen.relative_to(ROOT)} there"
        )
    shutil.copyfile(frozen, target)
    try:
        yield
    finally:
        target.unlink(missing_ok=True)


def check_installed_upgrade_script(db: psycopg.Connection, old: str, new: str) -> None:
    sharedir = Path(db.execute("select setting from pg_config where name = 'SHAREDIR'").fetchone()[0])
    installed = sharedir / "extension" / f"emem--{old}--{new}.sql"
    source = SQL / installed.name
    assert installed.exists() and installed.read_text() == source.read_text(), (
        f"the server's {installed} is missing or differs from {source.relative_to(ROOT)}: run make install"
    )


def emulate_modules_of(conn: psycopg.Connection, version: str) -> None:
    """Lets this session's PL/Python modules (the current build) answer the SQL of release `version`."""
    conn.execute(f"do $$ import emem_db.entry as entry; entry.VERSION = {version!r} $$ language plpython3u")


def fill(conn: psycopg.Connection) -> None:
    """User data through the write API every release has had."""
    conn.execute("select emem.create_lane('sales'), emem.create_lane('hr')")
    conn.execute("select emem.create_agent_profile('clerk', array['sales'])")
    conn.execute("select emem.create_embedding_space('m', 3, 'fp', true)")
    items = [
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


def user_rows(conn: psycopg.Connection, tables: list[str]) -> dict[str, list]:
    """Every row of the tables that hold user data, with the columns they have now."""
    return {
        t: conn.execute(
            f"select coalesce(jsonb_agg(to_jsonb(x) order by to_jsonb(x)::text), '[]') from {t} as x"
        ).fetchone()[0]
        for t in tables
    }


# ---- the machinery checks itself -------------------------------------------------------------------------


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
    ("triggers", "drop trigger edges_refresh_labels on emem.edges"),
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
        definition = db.execute("select pg_get_viewdef('emem.record_summaries')").fetchone()[0].rstrip().rstrip(";")
        db.execute(
            f"create or replace view emem.record_summaries with (security_invoker = true) as {definition}"
            " where r.record_id > 0"
        )
    else:
        db.execute(change)
    differences = catalog_differences(before, catalog(db))
    assert category in differences, f"{change!r} changed {sorted(differences)} but not {category}"


# ---- the upgrades -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", UPGRADES)
def test_update_gives_the_catalog_of_a_fresh_install(db: psycopg.Connection, path: tuple[str, str]) -> None:
    old, new = path
    check_installed_upgrade_script(db, old, new)
    with (
        installable(db, old),
        installable(db, new),
        scratch_database(db, "updated") as updated,
        scratch_database(db, "fresh") as fresh,
    ):
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
    check_installed_upgrade_script(db, old, new)
    with installable(db, old), scratch_database(db, "data") as conn:
        conn.execute(sql.SQL("create extension emem version {} cascade").format(old))
        emulate_modules_of(conn, old)
        fill(conn)
        tables = [
            r[0]
            for r in conn.execute(
                "select c::regclass::text from pg_extension e, unnest(e.extconfig) as c"
                " where e.extname = 'emem' and (select relkind from pg_class where oid = c) = 'r' order by 1"
            )
        ]
        before = user_rows(conn, tables)
        # The release's own find cannot run here (its SQL calls the modules it shipped with): what
        # a find of 'apollo' must answer after the update is every note tagged so.
        apollo = {r[0] for r in conn.execute("select record_id from emem.record_tags where tag = 'apollo'")}
        emulate_modules_of(conn, new)  # the update's own statements call the modules as release `new`
        conn.execute(sql.SQL("alter extension emem update to {}").format(new))
        info = conn.info
        with psycopg.connect(
            host=info.host, port=info.port, user=info.user, dbname=info.dbname, autocommit=True
        ) as after:  # a new session loads the modules of the new version
            columns_before = {t: set(rows[0]) if rows else set() for t, rows in before.items()}
            rows_after = user_rows(after, tables)
            for table, rows in rows_after.items():
                kept = [{k: v for k, v in row.items() if k in columns_before[table]} for row in rows]
                assert sorted(map(repr, kept)) == sorted(map(repr, before[table])), f"{table} changed in the update"
                figures.add("records checked", len(rows), detail=f"update {old}->{new}")
            if new == CURRENT:  # an intermediate release's find needs the modules it shipped with
                found_after = {
                    r["record_id"]
                    for r in after.execute("select emem.e_gather_find_envelope('apollo', null, 1, 100)").fetchone()[0][
                        "rows"
                    ]
                }
                assert found_after == apollo
            after.execute("select emem.put_record('note', 'written after the update', 'sales', array['apollo'])")


def test_the_update_to_0_2_1_gives_an_edge_moved_by_its_end_id_its_ends_lanes(db: psycopg.Connection) -> None:
    """0.2.0's labels kept the lanes of an edge's old end when an UPDATE changed the end's id (a
    strict agent found the edge through them); the update to 0.2.1 repairs such labels and counts
    each label's ends."""
    check_installed_upgrade_script(db, "0.2.0", "0.2.1")
    with installable(db, "0.2.0"), scratch_database(db, "moved") as conn:
        conn.execute("create extension emem version '0.2.0' cascade")
        emulate_modules_of(conn, "0.2.0")
        conn.execute("select emem.create_lane('a'), emem.create_lane('b')")
        first, second, elsewhere = (
            conn.execute("select emem.put_record('note', %s, %s)", (content, lane)).fetchone()[0]
            for content, lane in (("one", "a"), ("two", "a"), ("three", "b"))
        )
        conn.execute("select emem.link_records(%s, %s, 'audited_by', '{}')", (first, second))
        conn.execute("update emem.edges set to_record_id = %s", (elsewhere,))
        labels = "select to_lane_name, lane_terms from emem.edge_labels"
        assert conn.execute(labels).fetchone() == ("a", ["a/audit"])  # what 0.2.0 left
        emulate_modules_of(conn, "0.2.1")
        conn.execute("alter extension emem update to '0.2.1'")
        assert conn.execute(labels).fetchone() == ("b", ["a/audit", "b/audit"])
        assert label_ends_mismatch(conn) == []  # the labels' ends, counted by the update


@pytest.mark.parametrize("release", OLD_RELEASES)
def test_every_frozen_release_updates_to_the_current_version(db: psycopg.Connection, release: str) -> None:
    with installable(db, release), scratch_database(db, "chain") as updated, scratch_database(db, "fresh") as fresh:
        updated.execute(sql.SQL("create extension emem version {} cascade").format(release))
        updated.execute("alter extension emem update")
        assert updated.execute("select extversion from pg_extension where extname = 'emem'").fetchone()[0] == CURRENT
        fresh.execute("create extension emem cascade")
        differences = catalog_differences(catalog(fresh), catalog(updated))
    assert not differences, describe(differences)


def test_a_released_install_script_never_changes() -> None:
    """Once a version is frozen in sql/releases/, the install script built for it must stay the same:
    a change needs a new version and an upgrade script."""
    frozen = RELEASES / f"emem--{CURRENT}.sql"
    if not frozen.exists():
        pytest.skip(f"{CURRENT} is not released (no {frozen.relative_to(ROOT)}): its script may still change")
    built = "".join(p.read_text() for p in sorted(SQL.glob("[0-9][0-9]_*.sql"))).replace("@EXTVERSION@", CURRENT)
    assert built == frozen.read_text(), f"the sources of released version {CURRENT} changed: bump the version"


def test_frozen_release_scripts_match_their_manifest() -> None:
    """sql/releases/SHA256SUMS records each frozen script when it ships (make freeze); none may
    change afterwards, and none may be added without its line."""
    manifest = dict(
        reversed(line.split(maxsplit=1)) for line in (RELEASES / "SHA256SUMS").read_text().splitlines() if line.strip()
    )
    frozen = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in RELEASES.glob("emem--*.sql")}
    assert frozen == manifest


@pytest.mark.parametrize("step", sorted((SQL / "upgrade").glob(f"emem--*--{CURRENT}.sql")), ids=lambda p: p.name)
def test_upgrade_into_the_current_version_is_its_steps_and_the_code(step: Path) -> None:
    """An upgrade creates the code again exactly as a fresh install does (make upgrade-script)."""
    code = "".join(p.read_text() for p in sorted(SQL.glob("[2-9][0-9]_*.sql")))
    assert (SQL / step.name).read_text() == (step.read_text() + code).replace("@EXTVERSION@", CURRENT)
