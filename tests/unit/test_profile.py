"""Pipeline profile weights are bounded, so that the merge's credits stay finite and exact."""

import psycopg
import pytest

from emem_db.profile import ProfileError, parse_profile
from emem_db.settings import SettingError, check_setting, find_settings, lane_isolation_mode

ACCEPTED = r"must be a number from 0\.000001 to 1000000"


@pytest.mark.parametrize("weight", ["1e308", "1e309", "1000001", "0.0000009", "5e-324", "nan", "-inf"])
def test_weights_out_of_bounds_are_refused_with_the_accepted_range(weight: str) -> None:
    with pytest.raises(ProfileError, match=ACCEPTED):
        parse_profile(f"tags:{weight}, fulltext")


def test_weights_at_the_bounds_are_accepted() -> None:
    assert parse_profile("tags:1000000, fulltext:0.000001") == {"tags": 1e6, "fulltext": 1e-6}


def test_the_database_refuses_an_overflowing_weight(db: psycopg.Connection) -> None:
    db.execute("select emem.create_lane('team'), emem.create_agent_profile('crew', array['team'])")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=ACCEPTED):
        db.execute("select emem.set_agent_setting('crew', 'emem.pipeline_profile', 'tags:1e308, fulltext:1e308')")
    db.execute("set emem.pipeline_profile = 'tags:1e308, fulltext:1e308'")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=ACCEPTED):
        db.execute("select emem.e_gather_find_envelope('apollo', null)")


def test_lane_isolation_is_named_for_what_it_does_and_takes_its_old_name() -> None:
    assert lane_isolation_mode(" Seed ") == lane_isolation_mode("page_filter") == "page_filter"
    assert not find_settings({"emem.lane_isolation": "seed"}).strict
    assert not find_settings({}).strict
    assert find_settings({"emem.lane_isolation": "strict"}).strict


@pytest.mark.parametrize(
    "name", ["emem.record_vector_candidates", "emem.window_vector_candidates", "emem.exact_totals_up_to"]
)
@pytest.mark.parametrize("value", ["¹", "٣", "1²", "-1", "1.5", ""])
def test_a_count_must_be_written_in_ascii_digits(name: str, value: str) -> None:
    """str.isdigit takes '¹', which int() refuses: the check must refuse it with its message."""
    with pytest.raises(SettingError, match="out of range; accepted: an integer"):
        check_setting(name, value)
