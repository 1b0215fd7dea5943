"""Downsampling keeps the shape: extremes, first/last, anomaly steps and non-finite events."""
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindwatch.report.downsample import downsample


def _pairs(xs, ys):
    return list(zip(xs, ys, strict=True))


def _same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a)
                      and math.isnan(b))


def test_short_series_is_returned_whole_without_nones():
    xs, ys = downsample([1, 2, 3, 4], [1.0, None, float("nan"), 2.0], 10)
    assert xs == [1, 3, 4]
    assert ys[0] == 1.0 and math.isnan(ys[1]) and ys[2] == 2.0


def test_long_series_fits_budget_and_keeps_ends_and_extremes():
    rnd = random.Random(0)
    steps = list(range(1, 100_001))
    values = [1.0 + rnd.random() for _ in steps]
    values[31_337] = 50.0          # one spike
    values[77_777] = -3.0          # one dip
    xs, ys = downsample(steps, values, 500)
    assert len(xs) <= 500
    assert xs[0] == 1 and xs[-1] == 100_000
    assert 31_338 in xs and 77_778 in xs
    assert max(ys) == 50.0 and min(ys) == -3.0
    assert xs == sorted(xs)
    lookup = dict(zip(steps, values, strict=True))
    assert all(lookup[x] == y for x, y in zip(xs, ys, strict=True))


def test_keep_steps_are_always_kept():
    steps = list(range(1, 50_001))
    values = [1.0] * len(steps)
    keep = {17, 25_000, 49_999}
    xs, _ = downsample(steps, values, 100, keep)
    assert keep <= set(xs)
    assert len(xs) <= 100


def test_keep_works_with_unsorted_steps():
    steps = list(range(10_000, 0, -1))
    values = [float(s % 7) for s in steps]
    xs, _ = downsample(steps, values, 50, {5000})
    assert 5000 in xs and len(xs) <= 50


def test_keep_larger_than_budget_wins():
    steps = list(range(1, 1001))
    keep = set(range(1, 1001, 5))            # 200 steps to keep, budget 20
    xs, _ = downsample(steps, [1.0] * 1000, 20, keep)
    assert keep <= set(xs)


def test_nonfinite_values_are_kept_as_events():
    steps = list(range(1, 20_001))
    values = [1.0] * len(steps)
    values[500] = float("nan")
    values[9000] = float("inf")
    values[15000] = float("-inf")
    xs, ys = downsample(steps, values, 100)
    got = dict(zip(xs, ys, strict=True))
    assert math.isnan(got[501]) and got[9001] == math.inf and got[15001] == -math.inf
    assert len(xs) <= 100


def test_long_nan_run_is_compressed_to_its_ends():
    steps = list(range(1, 100_001))
    values = [2.0] * 40_000 + [float("nan")] * 60_000   # diverged and kept going on NaN
    xs, ys = downsample(steps, values, 200)
    nan_steps = [x for x, y in zip(xs, ys, strict=True) if math.isnan(y)]
    assert nan_steps == [40_001, 100_000]
    assert len(xs) <= 200


def test_alternating_nonfinite_values_still_fit_the_budget():
    steps = list(range(1, 10_001))
    values = [float("nan") if i % 2 else 1.0 for i in steps]
    xs, _ = downsample(steps, values, 100)
    assert len(xs) <= 100


def test_nones_are_dropped_in_long_series():
    steps = list(range(1, 10_001))
    values = [None if i % 3 == 0 else float(i) for i in steps]
    xs, ys = downsample(steps, values, 100)
    assert None not in ys and len(xs) <= 100 and xs[-1] == 10_000


def test_huge_finite_values_take_the_exact_path():
    steps = list(range(1, 5001))
    values = [1e308] * 5000               # their float sum overflows; all are finite
    xs, ys = downsample(steps, values, 10)
    assert all(y == 1e308 for y in ys) and len(xs) <= 10


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_points"):
        downsample([1], [1.0], 1)
    with pytest.raises(ValueError, match="length"):
        downsample([1, 2], [1.0], 10)


values_strategy = st.lists(
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=32),
              st.floats(min_value=-1e6, max_value=1e6)), min_size=0, max_size=400)


@settings(max_examples=150, deadline=None)
@given(values=values_strategy, max_points=st.integers(2, 60),
       keep=st.sets(st.integers(0, 400), max_size=10))
def test_properties(values, max_points, keep):
    steps = list(range(len(values)))
    xs, ys = downsample(steps, values, max_points, keep)
    # a subsequence of the known input points, in order
    assert xs == sorted(set(xs))
    assert all(_same(values[x], y) for x, y in zip(xs, ys, strict=True))
    assert None not in ys
    known = [i for i, v in enumerate(values) if v is not None]
    forced = {i for i in known if i in keep}
    finite = [i for i in known if math.isfinite(values[i])]
    if finite:
        forced |= {finite[0], finite[-1]}
    assert len(xs) <= max(max_points, len(forced))
    assert forced <= set(xs)
    if len(known) > max_points and max_points - len(forced) >= 2 and finite:
        finite_out = [y for y in ys if math.isfinite(y)]
        assert max(finite_out) == max(values[i] for i in finite)
        assert min(finite_out) == min(values[i] for i in finite)
