"""``stop_exit_code``: an exit status, 1 to 255, or None (the default: exit as the script does).
What it does at a stop is tested with real processes in tests/mindspore/test_stop_exit_code.py."""
import pytest

from mindwatch import MonitorSettings


@pytest.mark.parametrize("value", [None, 1, 42, 255])
def test_an_exit_status_or_none_is_accepted(value):
    assert MonitorSettings(stop_exit_code=value).stop_exit_code == value


def test_the_default_leaves_the_exit_status_alone():
    assert MonitorSettings().stop_exit_code is None
    assert MonitorSettings().as_record()["stop_exit_code"] is None


@pytest.mark.parametrize("value", [0, -1, 256, 1000])
def test_a_status_outside_1_to_255_is_refused(value):
    with pytest.raises(ValueError, match="stop_exit_code must be"):
        MonitorSettings(stop_exit_code=value)


@pytest.mark.parametrize("value", [True, 42.0, "42"])
def test_a_status_that_is_no_int_is_refused(value):
    with pytest.raises(TypeError, match="stop_exit_code must be an int or None"):
        MonitorSettings(stop_exit_code=value)
