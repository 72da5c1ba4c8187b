"""Concurrent activations of embedding spaces take turns: both succeed, exactly one space is active."""

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from queries import scalar

ROUNDS = 20


def spaces(db: psycopg.Connection, count: int) -> list[int]:
    return [scalar(db, "select emem.create_embedding_space(%s, 3)", (f"model-{n}",)) for n in range(count)]


def active_spaces(db: psycopg.Connection) -> list[int]:
    return [row[0] for row in db.execute("select space_id from emem.embedding_spaces where is_active")]


def waiting_on_a_lock(db: psycopg.Connection, pid: int) -> bool:
    # wait_event_type is null while the backend is not waiting at all
    return scalar(db, "select wait_event_type = 'Lock' from pg_stat_activity where pid = %s", (pid,)) is True


def test_a_second_activation_waits_for_the_first_and_then_wins(db: psycopg.Connection, dsn: Callable[..., str]) -> None:
    first_space, second_space = spaces(db, 2)
    db.execute("select emem.activate_embedding_space(%s)", (spaces(db, 3)[2],))
    with psycopg.connect(dsn()) as first, psycopg.connect(dsn()) as second:
        first.execute("select emem.activate_embedding_space(%s)", (first_space,))  # its transaction stays open
        outcome: list[BaseException | None] = []

        def activate_second() -> None:
            try:
                second.execute("select emem.activate_embedding_space(%s)", (second_space,))
                second.commit()
                outcome.append(None)
            except psycopg.Error as error:
                outcome.append(error)

        thread = threading.Thread(target=activate_second)
        thread.start()
        deadline = time.monotonic() + 10
        while not waiting_on_a_lock(db, second.info.backend_pid):
            assert time.monotonic() < deadline, "the second activation never waited for the first"
            time.sleep(0.05)
        first.commit()
        thread.join(10)
        assert outcome == [None]
    assert active_spaces(db) == [second_space]


@pytest.mark.parametrize("round_number", range(ROUNDS))
def test_two_sessions_activating_different_spaces_at_once_both_succeed(
    db: psycopg.Connection, dsn: Callable[..., str], round_number: int
) -> None:
    chosen = spaces(db, 3)
    db.execute("select emem.activate_embedding_space(%s)", (chosen[round_number % 3],))
    others = [space for space in chosen if space != chosen[round_number % 3]]
    start = threading.Barrier(len(others))
    errors: list[BaseException] = []

    def activate(space_id: int) -> None:
        with psycopg.connect(dsn(), autocommit=True) as session:
            start.wait()
            try:
                session.execute("select emem.activate_embedding_space(%s)", (space_id,))
            except psycopg.Error as error:
                errors.append(error)

    threads = [threading.Thread(target=activate, args=(space,)) for space in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(active_spaces(db)) == 1 and active_spaces(db)[0] in others
