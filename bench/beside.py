"""The previous release beside this one, in one run (`--beside 0.2.1`).

The same corpus is loaded into a second database with the previous release (its own load path:
writes.py), both are checked to hold the same rows, and page 1 and page 10 of every question, with
its vector and degraded, are timed on both in the same rounds: each round runs every cell of both
releases in a new shuffled order, so that neither gets a warmer cache. Each page's record ids, in
order, are compared between the releases.
"""

from __future__ import annotations

from typing import Any

import psycopg
from measure import Cell, percentiles
from questions import Question
from report import fmt, ratio

PAGES = (1, 10)
SHOWN_IDS = 5  # record ids shown from the first position where two pages differ
# What both databases must hold alike for their pages to be comparable (vectors come from the
# same generator and are not compared).
FINGERPRINTS = {
    "records": """select count(*), md5(string_agg(concat_ws('|', record_id, lane_name, kind, thread_id,
                         thread_position, md5(content)), ',' order by record_id)) from emem.records""",
    "tags": """select count(*), md5(string_agg(concat_ws('|', record_id, tag), ',' order by record_id, tag))
               from emem.record_tags""",
    "edges": """select count(*), md5(string_agg(concat_ws('|', from_record_id, to_record_id, relation, properties),
                       ',' order by from_record_id, to_record_id, relation, properties::text)) from emem.edges""",
    "windows": """select count(*), md5(string_agg(concat_ws('|', lane_name, thread_id, first_position, last_position),
                         ',' order by lane_name, thread_id, first_position)) from emem.windows""",
}


def fingerprint(conn: psycopg.Connection) -> dict[str, list[Any]]:
    return {name: list(conn.execute(query).fetchone() or ()) for name, query in FINGERPRINTS.items()}


def same_corpus(this: psycopg.Connection, previous: psycopg.Connection) -> dict[str, dict[str, Any]]:
    """Which tables the two databases hold alike (count and a digest of their rows)."""
    mine, theirs = fingerprint(this), fingerprint(previous)
    return {name: {"same": mine[name] == theirs[name], "rows": [mine[name][0], theirs[name][0]]} for name in mine}


def key_of(question: Question, mode: str, page: int) -> str:
    return f"{question.kind}/{mode}/p{page}"


def beside_cells(
    connections: dict[str, psycopg.Connection],
    questions: list[Question],
    modes: dict[str, bool],
    query: str,
    page_size: int,
) -> list[Cell]:
    """Every question, mode and page on each release's connection, keyed `<release>/<key>`."""
    return [
        Cell(
            f"{release}/{key_of(q, mode, page)}",
            conn,
            query,
            (q.text, q.vector if with_vector else None, page, page_size),
            [],
        )
        for release, conn in connections.items()
        for q in questions
        for mode, with_vector in modes.items()
        for page in PAGES
    ]


def page_ids(cell: Cell) -> list[int]:
    envelope = cell.first_rows[0][0] if cell.first_rows else {}
    return [int(row["record_id"]) for row in envelope.get("rows", [])]


def difference(new: Cell, old: Cell) -> dict[str, Any] | None:
    """Where two answers of the same page part, or None when they are the same ids in the same order."""
    ids_new, ids_old = page_ids(new), page_ids(old)
    if ids_new == ids_old:
        return None
    position = next(
        (n for n, (a, b) in enumerate(zip(ids_new, ids_old, strict=False)) if a != b), min(len(ids_new), len(ids_old))
    )
    envelopes = [cell.first_rows[0][0] if cell.first_rows else {} for cell in (new, old)]
    return {
        "rank": position + 1,
        "rows": [len(ids_new), len(ids_old)],
        "ids_from_there": [ids_new[position : position + SHOWN_IDS], ids_old[position : position + SHOWN_IDS]],
        "total_candidates": [e.get("total_candidates") for e in envelopes],
        "common_ids": len(set(ids_new) & set(ids_old)),
    }


def pairs(cells: list[Cell], this: str, previous: str) -> dict[str, tuple[Cell, Cell]]:
    """Each key's cell of this release and of the previous one."""
    by_key = {cell.key: cell for cell in cells}
    keys = dict.fromkeys(cell.key.split("/", 1)[1] for cell in cells)
    return {key: (by_key[f"{this}/{key}"], by_key[f"{previous}/{key}"]) for key in keys}


def pages(differences: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """How many pages are the same in both releases, which differ, and where the first parts."""
    different = [key for key, found in differences.items() if found]
    return {
        "pages_identical": len(differences) - len(different),
        "pages_different": len(different),
        "different": different,
        "first_difference": {"page": different[0], **(differences[different[0]] or {})} if different else None,
    }


def compare(cells: list[Cell], this: str, previous: str) -> dict[str, Any]:
    """Per question, mode and page: both releases' percentiles, their p50 ratio, and where their
    pages differ; with the count of identical and different pages."""
    rows: dict[str, dict[str, Any]] = {}
    for key, (new, old) in pairs(cells, this, previous).items():
        timed = {release: percentiles(cell.times) for release, cell in ((this, new), (previous, old))}
        rows[key] = timed | {
            "ratio_p50": ratio(timed[this]["p50"], timed[previous]["p50"]),
            "difference": difference(new, old),
        }
    return {
        "releases": [this, previous],
        "cells": rows,
        **pages({key: row["difference"] for key, row in rows.items()}),
    }


def exact_vector_pages(cells: list[Cell], this: str, previous: str) -> dict[str, Any]:
    """The same pages compared once more with index scans off on both connections: no HNSW graph
    serves a vector lookup (each release's database built its own, and pgvector's graphs are
    random), so what still differs comes from the releases themselves."""
    connections = {id(cell.conn): cell.conn for cell in cells}.values()
    for conn in connections:
        conn.execute("set enable_indexscan = off")
    try:
        for cell in cells:
            cell.run()
    finally:
        for conn in connections:
            conn.execute("reset enable_indexscan")
    return pages({key: difference(new, old) for key, (new, old) in pairs(cells, this, previous).items()})


LOAD_RATES = (
    ("put_records", "records_per_second", "records/s"),
    ("edges", "edges_per_second", "edges/s"),
    ("put_window", "put_window_per_second", "windows/s"),
)


def load_lines(this: str, new: dict[str, Any], previous: str, old: dict[str, Any]) -> list[str]:
    lines = [f"{'load':<14}{this:>10}{previous:>10}{'ratio':>7}  (edges: {new['edges_by']} / {old['edges_by']})"]
    for name, field, unit in LOAD_RATES:
        lines.append(
            f"{name:<14}{fmt(new.get(field), 10)}{fmt(old.get(field), 10)}"
            f"{fmt(ratio(new.get(field), old.get(field)), 7, 2)}  {unit}"
        )
    return lines


def pages_line(found: dict[str, Any], this: str, previous: str) -> str:
    line = f"{found['pages_identical']} identical, {found['pages_different']} different"
    first = found["first_difference"]
    if first is None:
        return line
    return (
        f"{line} ({', '.join(found['different'])}); the first, {first['page']}, from rank {first['rank']}:"
        f" {this} {first['ids_from_there'][0]}, {previous} {first['ids_from_there'][1]} (rows {first['rows'][0]}"
        f" / {first['rows'][1]}, {first['common_ids']} ids in common; total_candidates"
        f" {first['total_candidates'][0]} / {first['total_candidates'][1]})"
    )


def beside_lines(summary: dict[str, Any], this_load: dict[str, Any]) -> str:
    """The tables of a run beside the previous release; `summary` holds that release's load."""
    this, previous = summary["releases"]
    same = ", ".join(
        f"{name} {'same' if c['same'] else 'DIFFERENT'} ({c['rows'][0]})" for name, c in summary["corpus"].items()
    )
    lines = [
        f"{this} beside {previous}: the same corpus ({same}), the same questions, in the same shuffled rounds",
        *load_lines(this, this_load, previous, summary["load"]),
        f"find, ms: {this} and {previous} p50 / p95; ratio = {this} p50 / {previous} p50; page = same record ids"
        " in the same order",
        f"{'question':<13}{'vector':<9}{'page':>5}{this + ' p50':>10}{'p95':>7}{previous + ' p50':>10}{'p95':>7}"
        f"{'ratio':>7}  page",
    ]
    for key, row in summary["cells"].items():
        kind, mode, page = key.split("/")
        new, old = row[this], row[previous]
        lines.append(
            f"{kind:<13}{mode:<9}{page:>5}{fmt(new['p50'], 10)}{fmt(new['p95'], 7)}{fmt(old['p50'], 10)}"
            f"{fmt(old['p95'], 7)}{fmt(row['ratio_p50'], 7, 2)}  {'same' if not row['difference'] else 'differs'}"
        )
    lines.append("pages: " + pages_line(summary, this, previous))
    exact = pages_line(summary["exact_vector_pages"], this, previous)
    lines.append(f"pages with exact vector lookups (index scans off, no HNSW graph): {exact}")
    return "\n".join(lines)
