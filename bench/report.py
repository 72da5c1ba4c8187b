"""Summaries, the printed tables and the machine description."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import psycopg
from db import scalar
from measure import Cell, percentiles

FIND_CELLS = ("find_p1", "find_p10", "find_table_p1", "find_table_p10", "exact_first_p1", "find_exact_p1")
FLOOR_LOOKUPS = ("tags", "fulltext", "record_vectors", "window_vectors")
COUNTS = ("tags_count", "fulltext_count", "vectors_count")
# The recommended profile's floor: its lookups for page 1 (the default floor's where they are the
# same) and the default profile's counts plus counting the content words' matches.
EXACT_FIRST_LOOKUPS = {
    "vector": ("xf_tags", "xf_fulltext_by_rarity", "xf_fulltext_words", "record_vectors", "window_vectors"),
    "degraded": ("tags", "xf_fulltext_by_rarity", "xf_fulltext_words"),
}
EXACT_FIRST_COUNTS = (*COUNTS, "xf_words_count")
HYBRIDS = ("hybrid", "hybrid_recipe")


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 2)


def count_of(cells: dict[str, Cell], name: str) -> int | None:
    cell = cells.get(name)
    return int(cell.first_rows[0][0]) if cell and cell.first_rows else None


def expected_rows(name: str, cells: dict[str, Cell], page_size: int) -> int | None:
    """How many rows a correct bare query returns; None when any number is right."""
    if name in ("tags", "tags_exact", "tags_hnsw"):
        count = count_of(cells, "tags_count")
        return None if count is None else min(page_size, count)
    if name in ("fulltext", "fulltext_exact", "fulltext_hnsw"):
        count = count_of(cells, "fulltext_count")
        return None if count is None else min(page_size, count)
    if name == "record_vectors":
        return page_size
    return None


def floor_summary(cells: dict[str, Cell], page_size: int) -> dict[str, Any]:
    """The floor of one question and mode: each lookup's fastest correct bare query."""
    medians: dict[str, float] = {}
    chosen: dict[str, str] = {}
    incorrect: dict[str, str] = {}
    for name, cell in cells.items():
        if name in FIND_CELLS or name in HYBRIDS or name.startswith("xf_"):
            continue
        wanted = expected_rows(name, cells, page_size)
        got = len(cell.first_rows or [])
        if wanted is not None and got != wanted:
            incorrect[name] = f"returned {got} rows, needs {wanted}"
            continue
        lookup = next(
            (prefix for prefix in ("tags", "fulltext") if name.startswith(prefix) and name not in COUNTS), name
        )
        median = percentiles(cell.times)["p50"]
        if lookup not in medians or median < medians[lookup]:
            medians[lookup] = median
            chosen[lookup] = name
    floor = sum(medians.get(name, 0.0) for name in FLOOR_LOOKUPS)
    counts = sum(medians.get(name, 0.0) for name in COUNTS)
    return {
        "lookups_ms": {name: medians[name] for name in FLOOR_LOOKUPS if name in medians},
        "chosen": {name: chosen[name] for name in FLOOR_LOOKUPS if name in chosen},
        "counts_ms": {name: medians[name] for name in COUNTS if name in medians},
        "floor_ms": round(floor, 3),
        "floor_with_counts_ms": round(floor + counts, 3),
        "incorrect": incorrect,
    }


def exact_first_floor(cells: dict[str, Cell], floor: dict[str, Any], with_vector: bool) -> dict[str, float]:
    """The recommended profile's floor, with the counts its exact totals need."""
    median = {
        **floor["lookups_ms"],
        **floor["counts_ms"],
        **{name: percentiles(cell.times)["p50"] for name, cell in cells.items() if name.startswith("xf_")},
    }
    median.setdefault("xf_tags", median.get("tags", 0.0))  # one term: the default tag list is in the same order
    lookups = sum(median.get(name, 0.0) for name in EXACT_FIRST_LOOKUPS["vector" if with_vector else "degraded"])
    return {
        "floor_ms": round(lookups, 3),
        "floor_with_counts_ms": round(lookups + sum(median.get(name, 0.0) for name in EXACT_FIRST_COUNTS), 3),
    }


def envelope(cell: Cell) -> dict[str, Any]:
    return cell.first_rows[0][0] if cell.first_rows else {}


def envelope_totals(cells: dict[str, Cell]) -> dict[str, Any]:
    first, tenth, exact = envelope(cells["find_p1"]), envelope(cells["find_p10"]), envelope(cells["find_exact_p1"])
    return {
        "total_candidates": first.get("total_candidates"),
        "total_pages": first.get("total_pages"),
        "totals_exact": first.get("totals_exact"),
        "exact_total_candidates": exact.get("total_candidates"),
        "rows_page_1": len(first.get("rows", [])),
        "rows_page_10": len(tenth.get("rows", [])),
        "same_rows_as_exact": [r["record_id"] for r in first.get("rows", [])]
        == [r["record_id"] for r in exact.get("rows", [])],
    }


def summarise(cells: dict[str, Cell], page_size: int, with_vector: bool) -> dict[str, Any]:
    find = {name: percentiles(cells[name].times) for name in FIND_CELLS}
    hybrid = {name: percentiles(cells[name].times) for name in HYBRIDS}
    floor = floor_summary(cells, page_size)
    xf_floor = exact_first_floor(cells, floor, with_vector)
    p1 = find["find_p1"]["p50"]
    return {
        "find": find,
        "hybrid": hybrid,
        "floor": floor,
        "exact_first_floor": xf_floor,
        **envelope_totals(cells),
        "ratios": {
            "find_over_floor": ratio(p1, floor["floor_ms"]),
            "find_over_floor_with_counts": ratio(p1, floor["floor_with_counts_ms"]),
            "find_over_hybrid": ratio(p1, hybrid["hybrid"]["p50"]),
            "find_over_hybrid_recipe": ratio(p1, hybrid["hybrid_recipe"]["p50"]),
            "p95_over_p50": ratio(find["find_p1"]["p95"], p1),
            "page10_over_page1": ratio(find["find_p10"]["p50"], p1),
            "exact_totals_over_floor_with_counts": ratio(find["find_exact_p1"]["p50"], floor["floor_with_counts_ms"]),
            "exact_totals_over_bounded": ratio(find["find_exact_p1"]["p50"], p1),
            "exact_first_over_floor_with_counts": ratio(find["exact_first_p1"]["p50"], floor["floor_with_counts_ms"]),
            "exact_first_over_its_floor_with_counts": ratio(
                find["exact_first_p1"]["p50"], xf_floor["floor_with_counts_ms"]
            ),
        },
    }


# ---- printing -------------------------------------------------------------------------------


def fmt(value: float | int | None, width: int = 7, digits: int = 1) -> str:
    if value is None:
        return "-".rjust(width)
    if isinstance(value, int):
        return str(value).rjust(width)
    return f"{value:.{digits}f}".rjust(width)


LATENCY_HEADER = (
    f"{'question':<13}{'vector':<9}{'p1 p50':>8}{'p1 p95':>8}{'p10 p50':>8}{'p10 p95':>8}"
    f"{'tbl p1':>8}{'tbl p10':>8}{'xf p1':>8}{'exact p1':>9}{'cands':>8}{'exact':>6}{'all cands':>10}{'pages':>6}"
    f"{'rows p10':>9}"
)
RATIO_HEADER = (
    f"{'question':<13}{'vector':<9}{'find':>7}{'floor':>7}{'fl+cnt':>7}{'exact':>7}{'hybrid':>7}{'recipe':>7}"
    f"{'f/floor':>8}{'f/fl+c':>8}{'ex/fl+c':>8}{'f/hyb':>7}{'p95/50':>7}{'p10/p1':>7}  floor lookups (ms)"
)


def latency_line(kind: str, mode: str, s: dict[str, Any]) -> str:
    f = s["find"]
    return (
        f"{kind:<13}{mode:<9}{fmt(f['find_p1']['p50'], 8)}{fmt(f['find_p1']['p95'], 8)}"
        f"{fmt(f['find_p10']['p50'], 8)}{fmt(f['find_p10']['p95'], 8)}{fmt(f['find_table_p1']['p50'], 8)}"
        f"{fmt(f['find_table_p10']['p50'], 8)}{fmt(f['exact_first_p1']['p50'], 8)}"
        f"{fmt(f['find_exact_p1']['p50'], 9)}{fmt(s['total_candidates'], 8)}"
        f"{('yes' if s['totals_exact'] else 'no').rjust(6)}{fmt(s['exact_total_candidates'], 10)}"
        f"{fmt(s['total_pages'], 6)}{fmt(s['rows_page_10'], 9)}"
    )


def ratio_line(kind: str, mode: str, s: dict[str, Any]) -> str:
    r, fl = s["ratios"], s["floor"]
    lookups = " ".join(f"{name}={ms:.1f}" for name, ms in fl["lookups_ms"].items())
    counts = " ".join(f"{name}={ms:.1f}" for name, ms in fl["counts_ms"].items())
    return (
        f"{kind:<13}{mode:<9}{fmt(s['find']['find_p1']['p50'])}{fmt(fl['floor_ms'])}"
        f"{fmt(fl['floor_with_counts_ms'])}{fmt(s['find']['find_exact_p1']['p50'])}{fmt(s['hybrid']['hybrid']['p50'])}"
        f"{fmt(s['hybrid']['hybrid_recipe']['p50'])}{fmt(r['find_over_floor'], 8, 2)}"
        f"{fmt(r['find_over_floor_with_counts'], 8, 2)}{fmt(r['exact_totals_over_floor_with_counts'], 8, 2)}"
        f"{fmt(r['find_over_hybrid'], 7, 2)}"
        f"{fmt(r['p95_over_p50'], 7, 2)}{fmt(r['page10_over_page1'], 7, 2)}  {lookups}; {counts}"
    )


EXACT_FIRST_HEADER = f"{'question':<13}{'vector':<9}{'xf':>7}{'xfloor':>8}{'xfl+cnt':>8}{'xf/xfl+c':>9}{'xf/fl+c':>8}"


def exact_first_line(kind: str, mode: str, s: dict[str, Any]) -> str:
    r, fl = s["ratios"], s["exact_first_floor"]
    return (
        f"{kind:<13}{mode:<9}{fmt(s['find']['exact_first_p1']['p50'])}{fmt(fl['floor_ms'], 8)}"
        f"{fmt(fl['floor_with_counts_ms'], 8)}{fmt(r['exact_first_over_its_floor_with_counts'], 9, 2)}"
        f"{fmt(r['exact_first_over_floor_with_counts'], 8, 2)}"
    )


# Each table: its title, its header and the line of one question and mode.
TABLES: tuple[tuple[str, str, Callable[[str, str, dict[str, Any]], str]], ...] = (
    (
        "e_gather_find latency, ms (client wall time, warm; p1/p10 = page 1/10 of 30; tbl = e_gather_find,"
        " the others e_gather_find_envelope; xf = the recommended exact_first profile; exact p1 = page 1 with"
        " emem.exact_totals_up_to = 0; cands = total_candidates as find tells it, exact = whether that is exact"
        " (else a lower bound), all cands = the exact total; page 10 lies past the end when pages < 10)",
        LATENCY_HEADER,
        latency_line,
    ),
    (
        "side by side, p50 ms: find page 1; floor = sum of the four bare lookups for page 1;"
        " fl+cnt = floor + what the exact totals need (counting tag and full-text matches,"
        " fetching the 100 + 20 vector candidates); exact = find page 1 with exact totals (ex/fl+c its ratio);"
        " hybrid = two-way RRF (HNSW-served), recipe = as published",
        RATIO_HEADER,
        ratio_line,
    ),
    (
        "the recommended profile (xf) against its own floor, p50 ms: xfloor = the bare lookups of its"
        " components for page 1 (tags by matched terms, full text by summed IDF: unknown terms and content"
        " words), xfl+cnt = with the counts its totals need (fl+cnt's and the content words' matches);"
        " xf/fl+c = against the default profile's fl+cnt",
        EXACT_FIRST_HEADER,
        exact_first_line,
    ),
)


def tables(summaries: dict[str, dict[str, Any]]) -> str:
    """`summaries` keyed `<question kind>/<mode>`."""
    lines: list[str] = []
    for title, header, line in TABLES:
        lines += ["", title, header] if lines else [title, header]
        lines += [line(*cast(tuple[str, str], key.split("/")), summary) for key, summary in summaries.items()]
    return "\n".join(lines)


# ---- the machine ----------------------------------------------------------------------------


def meminfo_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine(conn: psycopg.Connection) -> dict[str, Any]:
    settings = (
        "server_version",
        "shared_buffers",
        "work_mem",
        "effective_cache_size",
        "jit",
        "max_parallel_workers_per_gather",
        "hnsw.ef_search",
        "emem.pipeline_profile",
        "emem.record_vector_candidates",
        "emem.window_vector_candidates",
    )
    return {
        "cores": os.cpu_count(),
        "ram_gb": meminfo_gb(),
        "cpu": cpu_model(),
        "os": platform.platform(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "postgresql": str(scalar(conn, "select version()")),
        "extensions": dict(
            conn.execute(
                "select extname, extversion from pg_extension where extname in ('emem', 'vector', 'plpython3u')"
            ).fetchall()
        ),
        "settings": {name: scalar(conn, "select current_setting(%s, true)", (name,)) for name in settings},
    }


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"{info['cores']} cores, {info['ram_gb']} GB RAM, {info['cpu']}; PostgreSQL "
        f"{info['settings']['server_version']}, pgvector {info['extensions'].get('vector')}, emem "
        f"{info['extensions'].get('emem')}; shared_buffers {info['settings']['shared_buffers']}"
    )
