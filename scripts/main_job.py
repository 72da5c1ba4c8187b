"""The finds of the main job (scripts/main_job.sh), each showing one lookup at work.

Reads the database from $EMEM_DSN; the corpus must be ingested (main_job.sh does it). The
questions were chosen on PostgreSQL 15's documentation; another version's text may rank
differently, and the script then says so instead of pretending.
"""

import os
import textwrap

import psycopg

from emem_client import Client, EmbeddedGateway, FindPage, FindRow
from emem_client.cli import FIND_COLUMNS, find_cells, lookup_labels, print_table

# An exact name whose best record is not among the record-vector lookup's nearest records.
EXACT_NAME_QUESTIONS = [
    ("Where is track_commit_timestamp mentioned?", "track_commit_timestamp"),
    ("Where else is enable_hashjoin mentioned?", "enable_hashjoin"),
    ("What is transaction_isolation?", "transaction_isolation"),
]
MEANING_QUESTION = "How long does a standby wait before cancelling queries that conflict with replay?"
WINDOW_QUESTION = "Why does the finance export on the replica keep failing?"
PAGE_SIZE = 30


def heading(text: str) -> None:
    print(f"\n== {text}")


def say(text: str) -> None:
    print(textwrap.fill(" ".join(text.split()), width=100))


def excerpt(content: str, name: str, before: int = 40) -> str:
    """The content from a little before the first mention of `name`."""
    start = max(0, content.find(name) - before)
    return ("…" if start else "") + content[start:]


def show_rows(page: FindPage, rows: list[FindRow], name: str | None = None) -> None:
    labels = lookup_labels(page)
    print_table(FIND_COLUMNS, [find_cells(row, labels, excerpt(row.content, name) if name else None) for row in rows])


def exact_name(client: Client) -> None:
    heading("1. An exact name, found through full text where vectors miss it")
    for question, name in EXACT_NAME_QUESTIONS:
        page = client.find(question, 1, PAGE_SIZE)
        by_fulltext = [row for row in page.rows if "fulltext" in row.found_by and name in row.content]
        missed = [row for row in by_fulltext if "record_vectors" not in row.found_by]
        if missed:
            break
    print(f'find "{question}"  ({page.total_candidates} candidates)')
    if not missed:
        say(f"On this corpus the record-vector lookup also found every record naming {name}:")
        show_rows(page, by_fulltext, name)
        return
    say(
        f"Full text finds every record that contains {name}. The record(s) below are not among the nearest "
        "records of the record-vector lookup (found by: fulltext only), so vectors alone would have missed them; "
        "the merge still places them on page 1:"
    )
    show_rows(page, missed, name)


def meaning_match(client: Client) -> None:
    heading("2. A meaning match, found through record vectors")
    page = client.find(MEANING_QUESTION, 1, PAGE_SIZE)
    print(f'find "{MEANING_QUESTION}"')
    say(
        "No exact name in the question: WordNet knows all its words, so full text does not run, and the "
        "nearest records by meaning come first:"
    )
    show_rows(page, page.rows[:4])


def window_hit(client: Client, connection: psycopg.Connection) -> None:
    heading("3. A window hit: a turn found through the conversation around it")
    page = client.find(WINDOW_QUESTION, 1, PAGE_SIZE)
    print(f'find "{WINDOW_QUESTION}"')
    hit = next((row for row in page.rows if row.found_by == ["window_vectors"]), None) or next(
        (row for row in page.rows if row.placed_by == "window_vectors"), None
    )
    if hit is None:
        say("No window placed a record on page 1 this time.")
        return
    alone = (
        "only through a window, not through its own vector"
        if hit.found_by == ["window_vectors"]
        else "through a window"
    )
    say(
        f"Record {hit.record_id} (rank {hit.rank}) was found {alone}. Its best window, {hit.windows[0]}, "
        "covers these consecutive turns:"
    )
    for thread_id, position, content in connection.execute(
        "select r.thread_id, r.thread_position, r.content from emem.window_members as m"
        " join emem.records as r on r.record_id = m.record_id"
        " where m.window_id = %s order by r.thread_position",
        (hit.windows[0],),
    ):
        marker = ">" if content == hit.content else " "
        print(f" {marker} {thread_id} #{position}: {content}")
    show_rows(page, [row for row in page.rows if "window_vectors" in row.found_by][:5])


def main() -> None:
    with psycopg.connect(os.environ["EMEM_DSN"], autocommit=True) as connection:
        client = Client(connection, EmbeddedGateway())
        exact_name(client)
        meaning_match(client)
        window_hit(client, connection)


if __name__ == "__main__":
    main()
