"""Releases as the tests meet them: the version being built, the releases shipped (their scripts
in sql/releases/, listed with their commits in sql/releases/MANIFEST), the in-database modules of
release 0.2.1 that older databases run (make install-legacy-modules), scratch databases, and the
extension's catalog, compared between a fresh install and an updated one."""

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from queries import scalar

ROOT = Path(__file__).resolve().parent.parent
SQL = ROOT / "sql"
RELEASES = SQL / "releases"
BUILD = ROOT / "build"


# SQL functions without a SET clause, so that PostgreSQL inlines them (into bulk writes and the
# records' check) or, for one called per item, so that no call changes search_path; every name in
# them is qualified. By signature, as the catalog and pgspot spell it.
INLINED_FUNCTIONS = {
    "emem._normal_tag(text)": "emem._normal_tag(tag text)",
    "emem._is_blank(text)": "emem._is_blank(value text)",
    "emem._nfc(text)": "emem._nfc(value text)",
    "emem._vector_text(jsonb)": "emem._vector_text(item jsonb)",
    "emem._has_thread(emem.record_kind)": "emem._has_thread(kind emem.record_kind)",
    "emem._edge_label_texts(text,jsonb)": "emem._edge_label_texts(relation text,properties jsonb)",
    "emem._edge_problem(text,jsonb)": "emem._edge_problem(relation text,properties jsonb)",
}


def pgspot_allowances() -> list[str]:
    """pgspot's arguments that let the inlined functions go without a search_path (PS005)."""
    return [arg for function in INLINED_FUNCTIONS.values() for arg in ("--proc-without-search-path", function)]


def control_default_version() -> str:
    """The release `CREATE EXTENSION emem` installs (emem.control's default_version)."""
    found = re.search(r"^default_version\s*=\s*'([^']+)'", (ROOT / "emem.control").read_text(), flags=re.MULTILINE)
    if found is None:
        raise LookupError("emem.control names no default_version")
    return found.group(1)


CURRENT = control_default_version()


def version_key(version: str) -> tuple[int | str, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"[.-]", version))


def manifest() -> list[dict[str, str]]:
    """The lines of sql/releases/MANIFEST: version, commit, kind, file, sha256."""
    fields = ("version", "commit", "kind", "file", "sha256")
    return [
        dict(zip(fields, line.split(), strict=True))
        for line in (RELEASES / "MANIFEST").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def shipped_releases() -> list[str]:
    return sorted({line["version"] for line in manifest()}, key=version_key)


def upgrade_scripts() -> dict[tuple[str, str], Path]:
    """(from, to) of every upgrade script: the shipped ones and those built into this version."""
    found = {}
    for path in [*RELEASES.glob("emem--*--*.sql"), *BUILD.glob(f"emem--*--{CURRENT}.sql")]:
        match = re.fullmatch(r"emem--(.+)--(.+)\.sql", path.name)
        if match:
            found[(match.group(1), match.group(2))] = path
    return dict(sorted(found.items(), key=lambda item: tuple(map(version_key, item[0]))))


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


def check_installed(db: psycopg.Connection, script: Path) -> None:
    """The server's copy of a script is the one built or shipped here (make install puts it there)."""
    sharedir = Path(scalar(db, "select setting from pg_config where name = 'SHAREDIR'"))
    installed = sharedir / "extension" / script.name
    assert installed.exists() and installed.read_text() == script.read_text(), (
        f"the server's {installed} is missing or differs from {script.relative_to(ROOT)}: run make install"
    )


def require_legacy_modules(db: psycopg.Connection) -> None:
    """Releases before 0.3.0 run the modules they shipped with, installed as emem_db (make
    install-legacy-modules, which scripts/setup.sh runs): without them their SQL cannot be called."""
    try:
        db.execute("do $$ import emem_db.entry $$ language plpython3u")
    except psycopg.errors.ExternalRoutineException:
        pytest.skip("the modules of release 0.2.1 are not installed: make install-legacy-modules (needs git history)")


def emulate_modules_of(conn: psycopg.Connection, version: str) -> None:
    """Lets this session's legacy modules (release 0.2.1's) answer the SQL of an earlier release."""
    conn.execute(f"do $$ import emem_db.entry as entry; entry.VERSION = {version!r} $$ language plpython3u")


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
