"""Lanes hold: for two roles bound to profiles with different lanes and a role
bound to none, no record of a lane a role cannot read reaches it through find, the envelope,
the timeline, label intersection, explain, a direct SELECT on any relation of schema emem,
an error message, a setting it sets, or a SECURITY DEFINER function called with another role's
name. Only the documented page rule (total_pages and total_candidates count every lane) tells
anything about other lanes. Every SECURITY DEFINER function pins its search_path, and pgspot
runs clean on the built install script.

Every lane's rows carry a secret token (in content, tags, metadata, thread ids, source keys,
edge properties); a probe fails when a token of a lane the role cannot read shows up anywhere.
"""

import contextlib
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import figures
import psycopg
import pytest
from checkout import ROOT
from databases import MakeRole
from finds import envelope
from psycopg import errors, sql
from queries import scalar
from releases import INLINED_FUNCTIONS, control_default_version, pgspot_allowances
from writes import put

pytest_plugins = ["figures"]

LANES = ("salesvault", "hrvault", "commons")
READS = {"sales": ("salesvault", "commons"), "hr": ("hrvault", "commons"), "none": ()}
PROFILE = {"sales": "salesvault_agent", "hr": "hrvault_agent"}
DIRECTION = {"salesvault": (1.0, 0.0, 0.0), "hrvault": (0.0, 1.0, 0.0), "commons": (0.0, 0.0, 1.0)}
VECTORS = (None, "[1,0,0]", "[0,1,0]", "[0,0,1]")
# Relations that hold no lane's data, so a role bound to no profile may read them.
LANE_FREE_RELATIONS = {"emem.embedding_spaces"}
# The only fields of the envelope allowed to depend on lanes the caller cannot read.
PAGE_RULE_FIELDS = {"total_pages", "total_candidates"}


@dataclass
class Vault:
    """Three lanes full of secrets, two agent roles bound to profiles, one role bound to none."""

    roles: dict[str, str]
    secrets: dict[str, str]
    cross_secret: str
    ids: dict[str, list[int]] = field(default_factory=dict)

    def readable_ids(self, who: str) -> set[int]:
        return {i for lane in READS[who] for i in self.ids[lane]}

    def unreadable(self, who: str) -> list[str]:
        return [lane for lane in LANES if lane not in READS[who]]

    def forbidden(self, who: str) -> list[str]:
        """Strings that must never reach `who`: other lanes' names and secrets, other roles' names,
        and the properties of the edge from lane salesvault to lane hrvault (no agent reads both)."""
        tokens = [self.cross_secret]
        for lane in self.unreadable(who):
            tokens += [lane, self.secrets[lane]]
        tokens += [name for other, name in self.roles.items() if other != who]
        return tokens

    def questions(self) -> list[str]:
        return [
            *self.secrets.values(),
            self.cross_secret,
            "invoice apollo project",
            "billed 1200 EUR",
            "turn chunk Kowalski customer:acme",
            " ".join(LANES),
        ]


def without_timings(value: object) -> object:
    """A JSON value without its *milliseconds keys (timings differ from call to call)."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not k.endswith("milliseconds")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def probed(who: str, path: str, vault: Vault) -> None:
    figures.add("lanes probed", len(vault.unreadable(who)), detail=path)


def assert_no_leak(what: object, who: str, vault: Vault, path: str) -> None:
    text = what if isinstance(what, str) else json.dumps(what, default=str, ensure_ascii=False)
    leaked = [token for token in vault.forbidden(who) if token in text]
    assert not leaked, f"{path} shows role {who} what it must not read: {leaked} in {text[:600]}"
    probed(who, path, vault)


def near(direction: tuple[float, ...], i: int) -> list[float]:
    """A vector a little off `direction`, the further the larger i."""
    return [d + 0.01 * (i + 1) * (k + 1) for k, d in enumerate(direction)]


def three_lanes(db: psycopg.Connection, make_role: MakeRole) -> Vault:
    """Every lane's records of every kind, with secrets in every field, windows and edges (one across
    lanes no agent reads both of); roles for the two profiles and one bound to none."""
    tag = uuid.uuid4().hex[:6]
    vault = Vault(roles={}, secrets={lane: f"{lane}{tag}x" for lane in LANES}, cross_secret=f"crossvault{tag}x")
    for lane in LANES:
        db.execute("select emem.create_lane(%s)", (lane,))
    for who, profile in PROFILE.items():
        db.execute("select emem.create_agent_profile(%s, %s)", (profile, list(READS[who])))
    db.execute("select emem.create_embedding_space('vault-model', 3, 'vault-fp', true)")
    for n, lane in enumerate(LANES):
        secret, direction = vault.secrets[lane], DIRECTION[lane]
        day = f"2026-0{n + 1}-1"
        items: list[dict[str, object]] = [
            {
                "kind": "note",
                "content": f"Invoice {secret} billed 1200 EUR for the apollo project",
                "lane": lane,
                "tags": [f"tag{secret}", "invoice", "apollo project"],
                "metadata": {"owner": secret},
                "source_key": f"src{secret}",
                "occurred_at": f"{day}1T09:00:00Z",
                "authority": 0.9,
                "vector": near(direction, 0),
            },
            {
                "kind": "entity",
                "content": f"Kowalski of {secret}",
                "lane": lane,
                "tags": ["customer:acme"],
                "occurred_at": f"{day}2T09:00:00Z",
                "vector": near(direction, 1),
            },
        ]
        items += [
            {
                "kind": "conversation",
                "content": f"turn {i} about {secret}",
                "lane": lane,
                "thread_id": f"thread{secret}",
                "thread_position": i,
                "occurred_at": f"{day}3T09:0{i}:00Z",
                "vector": near(direction, 2 + i),
            }
            for i in range(3)
        ]
        items += [
            {
                "kind": "file",
                "content": f"chunk {i} of {secret}",
                "lane": lane,
                "thread_id": f"file{secret}",
                "thread_position": i,
                "occurred_at": f"{day}4T09:0{i}:00Z",
                "vector": near(direction, 5 + i),
            }
            for i in range(2)
        ]
        ids = put(db, items)
        vault.ids[lane] = ids
        db.execute("select emem.put_window(%s, %s::vector)", (ids[2:5], str(near(direction, 9))))
        db.execute("select emem.put_window(%s, %s::vector)", (ids[5:7], str(near(direction, 10))))
        db.execute(
            "select emem.link_records(%s, %s, 'billed', %s)",
            (ids[0], ids[1], json.dumps({"invoice": f"INV{secret}", "amount": "1200 EUR"})),
        )
    db.execute(
        "select emem.link_records(%s, %s, 'crosses', %s)",
        (vault.ids["salesvault"][0], vault.ids["hrvault"][0], json.dumps({"code": vault.cross_secret})),
    )
    # Readable by hr (both ends are), not by sales.
    db.execute(
        "select emem.link_records(%s, %s, 'mentions', %s)",
        (vault.ids["hrvault"][1], vault.ids["commons"][0], json.dumps({"code": vault.secrets["hrvault"]})),
    )
    vault.roles = {
        "sales": make_role("sales", PROFILE["sales"]),
        "hr": make_role("hr", PROFILE["hr"]),
        "none": make_role("none"),
    }
    return vault


# Most tests only read the vault; those that write or analyse get a clone.
pytestmark = pytest.mark.corpus(three_lanes, read_only=True)
WRITES = pytest.mark.corpus(three_lanes, read_only=False)


@pytest.fixture
def vault(built: Vault) -> Vault:
    return built


@pytest.fixture
def sessions(vault: Vault, dsn: Callable[..., str]) -> Iterator[dict[str, psycopg.Connection]]:
    """One autocommit session per role: sales, hr and none."""
    conns = {who: psycopg.connect(dsn(name), autocommit=True) for who, name in vault.roles.items()}
    yield conns
    for conn in conns.values():
        conn.close()


def bound(sessions: dict[str, psycopg.Connection]) -> dict[str, psycopg.Connection]:
    """The sessions of roles bound to a profile (a role bound to none is refused: test_lanes)."""
    return {who: conn for who, conn in sessions.items() if READS[who]}


TAG_LOOKUPS = ("tags", "tags_by_terms")


def reached_by_tags(db: psycopg.Connection, question: str, record_id: int, lanes: tuple[str, ...]) -> bool:
    """Whether a tag lookup reaches the record for a reader of `lanes`: through a matching tag, or
    a matching edge both of whose ends lie in those lanes (computed here independently)."""
    reached: bool = scalar(
        db,
        """with q as (select array(select jsonb_array_elements_text(emem.analyse_question(%(q)s)->'terms')) as terms)
           select exists (select from emem.record_tags rt, emem.tag_vocabulary v, q
                          where rt.record_id = %(id)s and v.tag = rt.tag and v.lane_name = rt.lane_name
                            and v.tag_terms && q.terms and v.tag_terms <@ q.terms)
               or exists (select from emem.edges e join emem.edge_labels el using (edge_id)
                          join emem.records a on a.record_id = e.from_record_id
                          join emem.records b on b.record_id = e.to_record_id, q
                          where %(id)s in (e.from_record_id, e.to_record_id)
                            and el.label_terms && q.terms and el.label_terms <@ q.terms
                            and a.lane_name = any(%(lanes)s) and b.lane_name = any(%(lanes)s))""",
        {"q": question, "id": record_id, "lanes": list(lanes)},
    )
    return reached


def rows_for(db: psycopg.Connection, question: str, rows: list[dict[str, Any]], who: str) -> list[dict[str, Any]]:
    """The owner's rows as a role reads them: its lanes only; a row a tag lookup placed only
    through an edge the role cannot read is left out, and such a lookup is not named in found_by."""
    kept = []
    for row in rows:
        if row["lane"] not in READS[who]:
            continue
        if any(name in row["found_by"] for name in TAG_LOOKUPS) and not reached_by_tags(
            db, question, row["record_id"], READS[who]
        ):
            if row["placed_by"] in TAG_LOOKUPS:
                continue
            row = {**row, "found_by": [name for name in row["found_by"] if name not in TAG_LOOKUPS]}
        kept.append(row)
    return kept


def find_rows(
    conn: psycopg.Connection, question: str, vector: str | None, page: int, page_size: int
) -> list[dict[str, Any]]:
    return [
        r[0]
        for r in conn.execute(
            "select to_jsonb(f) from emem.e_gather_find(%s, %s::vector, %s, %s) as f order by f.rank",
            (question, vector, page, page_size),
        )
    ]


def snapshot(db: psycopg.Connection) -> list[tuple[str, object]]:
    """Every row of every table of schema emem, as the owner reads them."""
    tables = [
        r[0]
        for r in db.execute(
            "select c.oid::regclass::text from pg_class c where c.relnamespace = 'emem'::regnamespace"
            " and c.relkind in ('r', 'p') order by 1"
        )
    ]
    return [
        (
            t,
            scalar(db, f"select coalesce(jsonb_agg(to_jsonb(x) order by to_jsonb(x)::text), '[]') from {t} as x"),
        )
        for t in tables
    ]


# ---- find, the envelope, explain ----------------------------------------------------------------


def test_find_and_envelope_show_only_readable_records_and_the_page_rule_totals(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    for question in vault.questions():
        for vector in VECTORS:
            for page_size in (30, 4):
                page, pages = 1, 1
                while page <= pages:
                    owner = envelope(db, question, vector, page, page_size)
                    pages = owner["total_pages"]
                    for who, conn in bound(sessions).items():
                        mine = envelope(conn, question, vector, page, page_size)
                        # Everything but the rows is what the owner sees; the rows are the owner's
                        # rows that the role reads (rows_for). Only the totals count other lanes.
                        expected = {**owner, "rows": rows_for(db, question, owner["rows"], who)}
                        assert mine == expected, f"{who} asked {question!r} {vector} page {page}/{page_size}"
                        assert {r["record_id"] for r in mine["rows"]} <= vault.readable_ids(who)
                        assert_no_leak(
                            {k: v for k, v in mine.items() if k not in PAGE_RULE_FIELDS},
                            who,
                            vault,
                            "e_gather_find_envelope",
                        )
                        assert find_rows(conn, question, vector, page, page_size) == mine["rows"]
                        probed(who, "e_gather_find", vault)
                    page += 1


def test_explain_tells_an_agent_no_more_than_find(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    """Per-lookup counts, list ranks and times span every lane: an agent (under page_filter)
    gets the analysis and its own rows' provenance, exactly what find tells it."""

    def explain(conn: psycopg.Connection, question: str, vector: str | None) -> dict[str, Any]:
        explained = scalar(conn, "select emem.e_gather_explain(%s, %s::vector)", (question, vector))
        return cast(dict[str, Any], without_timings(explained))  # a dict stays a dict

    for question in vault.questions():
        for vector in VECTORS[:2]:
            owner = explain(db, question, vector)
            assert "lookups" in owner and all("list_ranks" in row for row in owner["rows"])
            for who, conn in bound(sessions).items():
                mine = explain(conn, question, vector)
                found = envelope(conn, question, vector)
                keep = ("rank", "record_id", "placed_by", "found_by")
                assert mine.pop("rows") == [{k: row[k] for k in keep} for row in found["rows"]]
                assert mine == {k: v for k, v in owner.items() if k not in ("rows", "lookups", "statements")}
                assert mine["total_candidates"] == found["total_candidates"]
                assert_no_leak({k: v for k, v in mine.items() if k != "question"}, who, vault, "e_gather_explain")
                probed(who, "e_gather_explain", vault)


# ---- timeline, label intersection -----------------------------------------------------------------


def test_timeline_lists_exactly_the_readable_records(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    for who, conn in bound(sessions).items():
        expected = [
            r[0]
            for r in db.execute(
                "select record_id from emem.records where lane_name = any(%s) order by occurred_at, record_id",
                (list(READS[who]),),
            )
        ]
        listed, page = [], 1
        while rows := conn.execute(
            "select to_jsonb(t) from emem.e_timeline('-infinity', 'infinity', %s, 3) as t", (page,)
        ).fetchall():
            assert_no_leak([r[0] for r in rows], who, vault, "e_timeline")
            listed += [r[0]["record_id"] for r in rows]
            page += 1
        assert listed == expected
        for lane in LANES:
            tagged = conn.execute(
                "select to_jsonb(t) from emem.e_timeline('-infinity', 'infinity', tags => array[%s]) as t",
                (f"tag{vault.secrets[lane]}",),
            ).fetchall()
            assert [r[0]["record_id"] for r in tagged] == ([vault.ids[lane][0]] if lane in READS[who] else [])
            probed(who, "e_timeline(tags)", vault)
        for kind in ("note", "conversation", "file", "entity"):
            rows = conn.execute(
                "select to_jsonb(t) from emem.e_timeline('-infinity', 'infinity', kinds => array[%s]) as t", (kind,)
            ).fetchall()
            assert {r[0]["lane"] for r in rows} <= set(READS[who])
            assert_no_leak([r[0] for r in rows], who, vault, "e_timeline(kinds)")


def test_label_intersection_lists_exactly_the_readable_records(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    wanted = [[f"tag{s}"] for s in vault.secrets.values()] + [
        ["invoice"],
        ["customer:acme"],
        ["invoice", "apollo project"],
        [f"tag{vault.secrets['hrvault']}", "invoice"],
    ]
    for tags in wanted:
        owner = [r[0] for r in db.execute("select to_jsonb(t) from emem.records_with_all_tags(%s) as t", (tags,))]
        for who, conn in bound(sessions).items():
            mine = [r[0] for r in conn.execute("select to_jsonb(t) from emem.records_with_all_tags(%s) as t", (tags,))]
            assert mine == [r for r in owner if r["lane"] in READS[who]]
            assert_no_leak(mine, who, vault, "records_with_all_tags")


# ---- direct reads -------------------------------------------------------------------------------


def relations(db: psycopg.Connection, kinds: str) -> list[str]:
    """The relations of schema emem of the given pg_class kinds, from the catalog: new ones are covered."""
    return [
        r[0]
        for r in db.execute(
            "select c.oid::regclass::text from pg_class c where c.relnamespace = 'emem'::regnamespace"
            " and c.relkind = any(%s) order by 1",
            (list(kinds),),
        )
    ]


def test_direct_select_on_every_relation_stays_inside_the_lanes(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    readable_relations = relations(db, "rvmpf")
    assert {"emem.records", "emem.record_summaries", "emem.edges", "emem.windows"} <= set(readable_relations)
    for relation in readable_relations:
        columns = {
            r[0]
            for r in db.execute(
                "select attname from pg_attribute where attrelid = %s::regclass and attnum > 0 and not attisdropped",
                (relation,),
            )
        }
        for who, conn in sessions.items():
            try:
                rows = [r[0] for r in conn.execute(f"select to_jsonb(x) from {relation} as x")]
            except errors.InsufficientPrivilege:
                probed(who, "direct select (refused)", vault)
                continue
            assert_no_leak(rows, who, vault, "direct select")
            for column in columns & {"record_id", "from_record_id", "to_record_id"}:
                assert {r[column] for r in rows} <= vault.readable_ids(who), f"{who} reads {relation}.{column}"
            for column in columns & {"lane_name", "lane"}:
                assert {r[column] for r in rows} <= set(READS[who]), f"{who} reads {relation}.{column}"
            if who == "none" and relation not in LANE_FREE_RELATIONS:
                assert rows == [], f"a role bound to no profile reads {relation}"
            if who != "none" and relation in ("emem.records", "emem.record_summaries"):
                assert {r["record_id"] for r in rows} == vault.readable_ids(who)


@WRITES
def test_sequences_and_statistics_tell_nothing_of_other_lanes(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    for table in relations(db, "r"):
        db.execute(f"analyze {table}")
    for who, conn in sessions.items():
        for sequence in relations(db, "S"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(f"select last_value from {sequence}")
            probed(who, "sequence", vault)
        stats = scalar(
            conn, "select coalesce(jsonb_agg(to_jsonb(s)), '[]') from pg_stats s where s.schemaname = 'emem'"
        )
        assert_no_leak(stats, who, vault, "pg_stats")
        stats = scalar(
            conn, "select coalesce(jsonb_agg(to_jsonb(s)), '[]') from pg_stats_ext s where s.schemaname = 'emem'"
        )
        assert_no_leak(stats, who, vault, "pg_stats_ext")


def test_temporary_relations_do_not_shadow_what_the_functions_read(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    """A role's own temporary tables named like emem's (searched first for unqualified names)
    change no answer: every function pins its search_path and qualifies its relations."""
    conn = sessions["sales"]

    def answers() -> list[object]:
        return [
            envelope(conn, vault.secrets["salesvault"] + " invoice", "[1,0,0]"),
            scalar(conn, "select jsonb_agg(to_jsonb(t)) from emem.e_timeline('-infinity', 'infinity') t"),
            scalar(conn, "select jsonb_agg(to_jsonb(t)) from emem.records_with_all_tags(array['invoice']) t"),
        ]

    before = answers()
    for relation in relations(db, "rv"):
        name = relation.split(".")[1]
        conn.execute(f"create temporary table {name} as select * from emem.record_summaries limit 0")
        conn.execute(
            f"insert into pg_temp.{name} (record_id, kind, lane, content, tags, authority, occurred_at,"
            " created_at, metadata) values (1, 'note', 'salesvault', 'SHADOW invoice', array['invoice'],"
            " 1, now(), now(), '{}')"
        )
    conn.execute("set search_path = pg_temp, public, emem")
    assert answers() == before
    probed("sales", "temporary relations", vault)


# ---- error messages and writes --------------------------------------------------------------------


def diagnostics(
    conn: psycopg.Connection, statement: str, args: tuple[object, ...] = (), named: object = None
) -> tuple[str | None, ...]:
    """An error's SQLSTATE, message, detail and hint; `named` (an id, a lane) replaced by a placeholder."""
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(statement, args)
    d = caught.value.diag
    fields = [d.message_primary, d.message_detail, d.message_hint]
    if named is not None:
        pattern = re.compile(rf"(?<![\w]){re.escape(str(named))}(?![\w])")
        fields = [None if f is None else pattern.sub("<named>", f) for f in fields]
    return caught.value.sqlstate, *fields


def test_another_lanes_record_is_an_unknown_record(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    """Every write that names a record of a lane the role cannot read fails exactly as it fails for
    an id no record has: same SQLSTATE, same message (but the id), same hint; nothing written."""
    before = snapshot(db)
    missing = scalar(db, "select max(record_id) + 1000 from emem.records")
    calls = {
        "tag_record": "select emem.tag_record({id}, array['x'])",
        "untag_record": "select emem.untag_record({id}, array['invoice'])",
        "link_records(from)": "select emem.link_records({id}, {own}, 'r')",
        "link_records(to)": "select emem.link_records({own}, {id}, 'r', '{{\"k\": \"v\"}}')",
        "put_record_vector": "select emem.put_record_vector({id}, '[1,2,3]')",
        "put_window": "select emem.put_window(array[{id}]::bigint[], '[1,2,3]')",
        "put_window(thread)": "select emem.put_window(array[{id}, {id} + 1]::bigint[], '[1,2,3]')",
    }
    for who, conn in sessions.items():
        own = vault.ids[READS[who][0]][0] if READS[who] else missing + 1
        for other in vault.unreadable(who):
            for name, template in calls.items():
                for victim in (vault.ids[other][0], vault.ids[other][2]):
                    theirs = diagnostics(conn, template.format(id=victim, own=own), named=victim)
                    nobody = diagnostics(conn, template.format(id=missing, own=own), named=missing)
                    assert theirs[0] in ("22023", "42501"), (name, theirs)
                    assert theirs == nobody, f"{name} tells {who} about lane {other}"
                    assert_no_leak(theirs, who, vault, f"error of {name}")
            written = json.dumps([{"kind": "note", "content": "x", "lane": other}])
            absent = json.dumps([{"kind": "note", "content": "x", "lane": "nosuchlane"}])
            theirs = diagnostics(conn, "select emem.put_records(%s)", (written,), named=other)
            nobody = diagnostics(conn, "select emem.put_records(%s)", (absent,), named="nosuchlane")
            assert theirs[0] == "42501"
            assert theirs == nobody
            probed(who, "error of put_records", vault)
    assert snapshot(db) == before


def test_agents_write_tables_only_through_the_api(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    """No direct insert, update or delete, in any lane (no chosen record ids, nothing around the
    API's checks), and no sequence to draw ids from."""
    before = snapshot(db)
    tables = [
        r[0]
        for r in db.execute(
            "select c.relname from pg_class c where c.relnamespace = 'emem'::regnamespace and c.relkind = 'r'"
        )
    ]
    for who, conn in sessions.items():
        own = vault.ids[READS[who][0]][0] if READS[who] else 1
        for table in tables:
            for statement in (
                f"insert into emem.{table} default values",
                f"update emem.{table} set {{c}} = {{c}}",
                f"delete from emem.{table}",
            ):
                column = scalar(
                    db,
                    "select attname from pg_attribute where attrelid = %s::regclass and attnum = 1",
                    (f"emem.{table}",),
                )
                with pytest.raises(errors.InsufficientPrivilege, match="permission denied"):
                    conn.execute(statement.format(c=column))
                probed(who, f"direct write to {table}", vault)
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(
                "insert into emem.records (record_id, kind, content, lane_name) values (%s, 'note', 'x', %s)",
                (own + 10**9, READS[who][0] if READS[who] else "commons"),
            )
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("select nextval('emem.records_record_id_seq')")
    assert snapshot(db) == before


@WRITES
def test_a_role_writes_into_its_own_lanes_with_tags_vectors_edges_and_windows(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    """The other side of the lanes: every write path works for a role inside the lanes it reads."""
    conn, outcomes = sessions["sales"], {}
    plain = [
        scalar(
            conn,
            "select emem.put_record(%s, %s, %s, thread_id => %s, thread_position => %s)",
            (kind, f"own {i}", lane, thread, position),
        )
        for i, (kind, lane, thread, position) in enumerate(
            [
                ("note", "salesvault", None, None),
                ("conversation", "commons", "own-thread", 0),
                ("conversation", "commons", "own-thread", 1),
            ]
        )
    ]
    writes = {
        "put_records with tags": (
            "select emem.put_records(%s)",
            (json.dumps([{"kind": "note", "content": "tagged", "lane": "salesvault", "tags": ["mine"]}]),),
        ),
        "put_records with a vector": (
            "select emem.put_records(%s)",
            (json.dumps([{"kind": "note", "content": "embedded", "lane": "commons", "vector": [1, 0, 0]}]),),
        ),
        "put_record with tags": ("select emem.put_record('note', 'tagged', 'salesvault', array['mine'])", ()),
        "tag_record": ("select emem.tag_record(%s, array['mine'])", (plain[0],)),
        "untag_record": ("select emem.untag_record(%s, array['mine'])", (plain[0],)),
        "put_record_vector": ("select emem.put_record_vector(%s, '[1,0,0]')", (plain[0],)),
        "link_records": ("select emem.link_records(%s, %s, 'about', '{\"k\": \"v\"}')", (plain[0], plain[1])),
        "put_window": ("select emem.put_window(%s, '[0,1,0]')", (plain[1:],)),
    }
    for name, (statement, args) in writes.items():
        try:
            conn.execute(statement, args)
            outcomes[name] = "ok"
        except psycopg.Error as error:
            outcomes[name] = f"{error.sqlstate} {error.diag.message_primary}"
    assert outcomes == dict.fromkeys(writes, "ok")


@WRITES
def test_keys_used_in_another_lane_are_invisible_to_a_writer(
    vault: Vault, sessions: dict[str, psycopg.Connection]
) -> None:
    """A source_key or a conversation position taken in a lane the role cannot read behaves as if it
    were free: the write succeeds in the role's own lane (no error naming a constraint, which would
    tell the role that another lane holds that key, and let one lane block another's keys)."""
    conn, hr = sessions["sales"], vault.secrets["hrvault"]
    attempts = {
        "source_key": json.dumps([{"kind": "note", "content": "mine", "lane": "salesvault", "source_key": f"src{hr}"}]),
        "thread position": json.dumps(
            [
                {
                    "kind": "conversation",
                    "content": "mine",
                    "lane": "salesvault",
                    "thread_id": f"thread{hr}",
                    "thread_position": 0,
                }
            ]
        ),
    }
    outcomes = {}
    for key, items in attempts.items():
        try:
            rows = conn.execute("select record_id, created from emem.put_records(%s)", (items,)).fetchall()
            outcomes[key] = "created" if rows and rows[0][1] else f"not created: {rows}"
        except psycopg.Error as error:
            outcomes[key] = f"{error.sqlstate} {error.diag.message_primary}"
        probed("sales", f"write with another lane's {key}", vault)
    assert outcomes == dict.fromkeys(attempts, "created")


# ---- settings, roles, SECURITY DEFINER -------------------------------------------------------------


def emem_settings() -> list[str]:
    """The settings of the template in control/, and names a caller might hope the extension reads."""
    template = (ROOT / "control" / "emem.conf").read_text()
    names = re.findall(r"^\s*(emem\.[a-z_]+)\s*=", template, flags=re.MULTILINE)
    assert names, "no emem.* setting found in control/emem.conf"
    return [
        *names,
        "emem.profile",
        "emem.agent_profile",
        "emem.lanes",
        "emem.lane",
        "emem.role",
        "emem.caller",
        "emem.readable_lanes",
        "emem.reads_all",
        "emem.bypass",
        "emem.anything",
    ]


def lane_probe(conn: psycopg.Connection, who: str, vault: Vault, path: str) -> None:
    """One round of reads after a setting changed: find (when the settings still let it run),
    the timeline and a direct read all stay inside the role's lanes."""
    question = " ".join([*vault.secrets.values(), "invoice"])
    if not READS[who]:
        for read in ("select emem.e_gather_find_envelope(%s, '[0,1,0]')", "select emem.e_timeline('-infinity', null)"):
            with pytest.raises(errors.InsufficientPrivilege, match="bound to no agent profile"):
                conn.execute(read, (question,) if "%s" in read else ())
    else:
        found = envelope(conn, question, "[0,1,0]")
        assert {r["lane"] for r in found["rows"]} <= set(READS[who])
        assert_no_leak(found["rows"], who, vault, path)
        lanes = {r[0] for r in conn.execute("select lane from emem.e_timeline('-infinity', 'infinity', 1, 1000)")}
        assert lanes <= set(READS[who])
    assert {r[0] for r in conn.execute("select record_id from emem.records")} == vault.readable_ids(who)
    probed(who, path, vault)


def test_no_setting_widens_what_a_role_reads(
    vault: Vault, sessions: dict[str, psycopg.Connection], dsn: Callable[..., str]
) -> None:
    values = [*PROFILE.values(), *LANES, ",".join(LANES), "*", "all", "on", "true", "postgres", *vault.roles.values()]
    for who, conn in sessions.items():
        for setting in emem_settings():
            for value in values:
                conn.execute("select set_config(%s, %s, false)", (setting, value))
                lane_probe(conn, who, vault, "set emem.*")
            conn.execute(sql.SQL("reset {}").format(sql.Identifier(*setting.split("."))))
        # As connection options, and as the role's own defaults for new sessions.
        options = " ".join(f"-c {s}={PROFILE['hr' if who == 'sales' else 'sales']}" for s in emem_settings())
        with psycopg.connect(dsn(vault.roles[who]), autocommit=True, options=options) as other:
            lane_probe(other, who, vault, "connection options")
        for setting in emem_settings():
            with contextlib.suppress(errors.InsufficientPrivilege):  # refused: nothing to claim
                conn.execute(
                    sql.SQL("alter role current_user set {} = 'hrvault_agent'").format(
                        sql.Identifier(*setting.split("."))
                    )
                )
        with psycopg.connect(dsn(vault.roles[who]), autocommit=True) as other:
            lane_probe(other, who, vault, "alter role set")
        conn.execute("alter role current_user reset all")


def test_a_role_cannot_become_another(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    owner = scalar(db, "select extowner::regrole::text from pg_extension where extname = 'emem'")
    for who, conn in sessions.items():
        for target in [*(name for other, name in vault.roles.items() if other != who), owner, "pg_read_all_data"]:
            for statement in ("set role {}", "set session authorization {}"):
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(sql.SQL(statement).format(sql.Identifier(target)))
                probed(who, "set role", vault)
        conn.execute("set row_security = off")
        with pytest.raises(errors.InsufficientPrivilege, match="row-level security"):
            conn.execute("select * from emem.records")
        conn.execute("reset row_security")
        for setting in ("session_replication_role", "allow_system_table_mods"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(sql.SQL("set {} = 'replica'").format(sql.Identifier(setting)))
        lane_probe(conn, who, vault, "set role")


def security_definer_functions(db: psycopg.Connection) -> list[tuple[str, str, list[str], list[str] | None, str]]:
    return db.execute(
        "select p.oid::regprocedure::text, p.proname, array(select format_type(t, null)"
        " from unnest(p.proargtypes) as t), p.proconfig, format_type(p.prorettype, null) from pg_proc p"
        " where p.pronamespace = 'emem'::regnamespace and p.prosecdef order by 1"
    ).fetchall()


def test_private_functions_are_executable_by_no_agent(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    """Internal functions (named _x) run only inside the API: an agent calling one directly is
    refused before it runs, whatever it passes."""
    private = db.execute(
        "select p.proname, array(select format_type(t, null) from unnest(p.proargtypes) as t) from pg_proc p"
        " where p.pronamespace = 'emem'::regnamespace and left(p.proname, 1) = '_' and p.prokind <> 'a'"
    ).fetchall()
    assert len(private) > 10
    for name, types in private:
        # (select null::type): not a constant, so a strict function is not folded away unchecked
        call = sql.SQL("select emem.{}({})").format(
            sql.Identifier(name), sql.SQL(", ").join(sql.SQL("(select null::{})").format(sql.SQL(t)) for t in types)
        )
        for who, conn in sessions.items():
            with pytest.raises(errors.InsufficientPrivilege, match=f"permission denied for function {name}"):
                conn.execute(call)
            probed(who, "private functions", vault)


def test_the_api_acts_for_the_sessions_role(
    vault: Vault, sessions: dict[str, psycopg.Connection], db: psycopg.Connection
) -> None:
    """A pool that does SET ROLE reads that role's lanes; after RESET ROLE, its own again."""
    question = " ".join([*vault.secrets.values(), "invoice"])
    for who in bound(sessions):
        db.execute(sql.SQL("set role {}").format(sql.Identifier(vault.roles[who])))
        try:
            found = envelope(db, question, None)
            assert {r["lane"] for r in found["rows"]} <= set(READS[who])
            assert_no_leak(found["rows"], who, vault, "set role")
        finally:
            db.execute("reset role")
    assert {r["lane"] for r in envelope(db, question, None)["rows"]} == set(LANES)


def test_every_security_definer_function_pins_its_search_path(db: psycopg.Connection) -> None:
    for signature, _, _, config, _ in security_definer_functions(db):
        assert config and "search_path=pg_catalog, pg_temp" in config, f"{signature} does not pin search_path"


# SQL functions written to be inlined into the caller's query, which a SET clause prevents: they
# are not SECURITY DEFINER and qualify every name (pgspot checks their bodies all the same).
def test_every_other_function_pins_its_search_path(db: psycopg.Connection) -> None:
    """Not only the definer functions (aggregates have no settings): all but the inlined ones."""
    loose = db.execute(
        "select p.oid::regprocedure::text, l.lanname, p.prosecdef from pg_proc p join pg_language l"
        " on l.oid = p.prolang where p.pronamespace = 'emem'::regnamespace and p.prokind <> 'a'"
        " and not coalesce('search_path=pg_catalog, pg_temp' = any(p.proconfig), false) order by 1"
    ).fetchall()
    assert [f for f in loose if f[0] not in INLINED_FUNCTIONS] == []
    assert all(language == "sql" and not definer for _, language, definer in loose)


# ---- pgspot -------------------------------------------------------------------------------------

# pgspot cannot read PL/Python bodies ("Unknown function language"): those functions are covered by
# the two catalog tests above (pinned search_path), and their SQL names every object by schema.
# The inlined SQL functions (INLINED_FUNCTIONS) may go without a search_path (PS005).
PGSPOT_IGNORED_LANGUAGES = ("plpython3u",)


def built_install_script() -> Path:
    version = control_default_version()
    script = ROOT / "build" / f"emem--{version}.sql"
    assert script.exists(), f"{script} is not built: run make"
    sources = "".join(p.read_text() for p in sorted((ROOT / "sql").glob("[0-9][0-9]_*.sql")))
    module = "emem_db_" + version.replace(".", "_")
    built = sources.replace("@EXTVERSION@", version).replace("@MODULE@", module)
    assert script.read_text() == built, f"{script} is stale: run make"
    return script


def test_pgspot_finds_nothing_in_the_install_script() -> None:
    pytest.importorskip("pgspot", reason="pgspot is not installed: python3 -m pip install pgspot")
    script = built_install_script()
    ignored = [arg for lang in PGSPOT_IGNORED_LANGUAGES for arg in ("--ignore-lang", lang)]
    ignored += pgspot_allowances()
    result = subprocess.run(
        [sys.executable, "-m", "pgspot", *ignored, str(script)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "Errors: 0 Warnings: 0 Unknown: 0" in result.stdout, (
        f"pgspot on {script.name}:\n{result.stdout}{result.stderr}"
    )


def documented_api() -> tuple[set[str], set[str]]:
    """The functions of docs/sql-api.md's API table: (those for every role, those for the owner only)."""
    text = (ROOT / "docs" / "sql-api.md").read_text()
    section = text[text.index("The API (`emem.` + name).") :]
    lines = section[section.index("| function | does |") :].split("\n\n")[0].splitlines()[2:]
    public: set[str] = set()
    owner: set[str] = set()
    for line in lines:
        _, functions, does, _ = line.split("|")
        (owner if "owner only" in does else public).update(re.findall(r"`(\w+)", functions))
    return public, owner


def test_a_fresh_role_can_execute_exactly_the_documented_api(
    db: psycopg.Connection, make_role: Callable[..., str]
) -> None:
    """The private inside: everything else in schema emem is executable by the owner only."""
    fresh = make_role("fresh")
    executable = {
        r[0]
        for r in db.execute(
            "select p.proname from pg_proc p where p.pronamespace = 'emem'::regnamespace"
            " and has_function_privilege(%s, p.oid, 'execute')",
            (fresh,),
        )
    }
    public, owner = documented_api()
    defined = {r[0] for r in db.execute("select proname from pg_proc where pronamespace = 'emem'::regnamespace")}
    assert public | owner <= defined, f"docs/sql-api.md names functions that do not exist: {(public | owner) - defined}"
    assert executable == public
    assert not owner & executable
