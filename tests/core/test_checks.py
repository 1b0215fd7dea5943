"""The shared argument checks: the error names the argument and what it accepts."""
import math

import pytest

from mindwatch.basics.checks import check_bool, check_choice, check_int, check_number
from mindwatch.settings import check_bool as settings_check_bool


def test_checks_are_importable_from_settings_too():
    assert settings_check_bool is check_bool


@pytest.mark.parametrize("call, error, match", [
    (lambda: check_int("n", True), TypeError, "n must be an int; got bool"),
    (lambda: check_int("n", None), TypeError, "n must be an int"),
    (lambda: check_int("n", 0, minimum=1), ValueError, "n must be >= 1; got 0"),
    (lambda: check_number("x", "1"), TypeError, "x must be a number; got str"),
    (lambda: check_number("x", math.nan), ValueError, "x must be finite"),
    (lambda: check_number("x", 0.0, low=0.0, low_open=True), ValueError, "x must be > 0.0"),
    (lambda: check_number("x", 1.0, high=1.0, high_open=True), ValueError, "x must be < 1.0"),
    (lambda: check_bool("flag", 1), TypeError, "flag must be True or False; got int"),
    (lambda: check_choice("mode", "fast", ("warn", "raise")), ValueError,
     "mode must be one of 'warn', 'raise'; got 'fast'"),
    (lambda: check_choice("level", True, (0, 1)), ValueError, "level must be one of 0, 1"),
])
def test_bad_values_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_good_values_pass():
    check_int("n", None, optional=True)
    check_int("n", 5, minimum=5)
    check_number("x", 1, low=0.0, high=1.0)
    check_number("x", None, optional=True)
    check_bool("flag", False)
    check_choice("mode", "raise", ["warn", "raise"])
    check_choice("port", None, (None, 0))
