"""mindwatch.basics.numbers.to_number: one conversion for inputs, probes and records read back."""
import math
from decimal import Decimal

import numpy as np
import pytest

from mindwatch.basics import format as fmt
from mindwatch.basics.numbers import to_number


class ZeroDimTensor:
    """What a framework's 0-d tensor offers: ``__float__``."""

    def __float__(self):
        return 2.5


@pytest.mark.parametrize("value, expected", [
    (1, 1.0), (2.5, 2.5), (np.float32(0.5), 0.5), (np.int64(7), 7.0), (np.array(3.0), 3.0),
    (ZeroDimTensor(), 2.5), (Decimal("1.25"), 1.25), (-math.inf, -math.inf),
    ("Infinity", math.inf), ("-Infinity", -math.inf),
])
def test_numbers(value, expected):
    assert to_number(value) == expected and type(to_number(value)) is float


def test_nan_stays_nan():
    assert math.isnan(to_number(math.nan)) and math.isnan(to_number("NaN"))
    assert math.isnan(to_number(np.float64("nan")))


@pytest.mark.parametrize("value", [None, True, False, np.bool_(True), "1.5", "nan", "", b"1",
                                   [1.0], object(), 1j, 10 ** 400])
def test_not_numbers_are_none(value):
    assert to_number(value) is None


def test_a_name_turns_not_a_number_into_a_type_error():
    assert to_number(None, "loss") is None           # unknown is allowed
    assert to_number(np.float32(1.0), "loss") == 1.0
    with pytest.raises(TypeError, match="loss must be a number or None; got str 'low'"):
        to_number("low", "loss")
    with pytest.raises(TypeError, match="lr must be a number or None; got bool"):
        to_number(True, "lr")


def test_device_memory_is_shown_in_gb_of_1024_mb():
    assert fmt.megabytes(1023.0) == "1023 MB" and fmt.megabytes(1536.0) == "1.5 GB"
