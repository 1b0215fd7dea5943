"""Chart axes computed once in Python for the HTML page and the PNGs, and the across-rank
spread shared by the summary and the report."""
import math

from mindwatch.report.axes import nice_ticks, panel_axis, tick_label
from mindwatch.report.spread import min_median_max, per_step, rank_spread, spread_text


def panel(ys, log=False, hlines=(), x_range=None):
    return {"lines": [{"x": list(range(1, len(ys) + 1)), "y": ys}], "log": log,
            "hlines": [{"y": y} for y in hlines], "x_range": x_range}


def test_nice_ticks():
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
    assert nice_ticks(1, 50) == [10, 20, 30, 40, 50]
    assert nice_ticks(-2.5, 3.2, log=True) == [-2, -1, 0, 1, 2, 3]
    assert nice_ticks(-6.3, 2.2, log=True) == [-5, -3, -1, 1]      # at most 8 decades
    assert nice_ticks(-20.0, 20.0, log=True) == [-20, -15, -10, -5, 0, 5, 10, 15, 20]
    within = nice_ticks(math.log10(2), math.log10(5), log=True)    # less than a decade
    assert [round(10 ** t, 9) for t in within] == [2, 3, 4, 5]


def test_tick_labels():
    assert [tick_label(10.0 ** e, True) for e in (-4, -3, 0, 2, 5, 6)] == [
        "1e-4", "0.001", "1", "100", "100000", "1e+6"]
    assert tick_label(2.5, True) == "2.5" and tick_label(0.6000000000000001, False) == "0.6"
    assert tick_label(0.0005, False) == "5.00e-04"


def test_linear_axis_pads_and_labels():
    axis = panel_axis(panel([1.0, 2.0, math.nan, 3.0], x_range=[1, 10]))
    assert axis["log"] is False and axis["x"] == [1, 10]
    assert axis["y"] == [0.9, 3.1]
    assert axis["y_ticks"] == [[1.0, "1"], [1.5, "1.5"], [2.0, "2"], [2.5, "2.5"], [3.0, "3"]]
    assert axis["x_ticks"][0] == [2, "2"] and axis["x_ticks"][-1] == [10, "10"]


def test_log_axis_auto_and_forced():
    assert panel_axis(panel([1.0, 20.0], log="auto"))["log"] is False
    axis = panel_axis(panel([1.0, 1000.0], log="auto", hlines=[1e-6]))
    assert axis["log"] is True and axis["y"][0] < -6 and axis["y"][1] > 3
    assert [label for _, label in axis["y_ticks"]] == ["1e-5", "0.001", "0.1", "10", "1000"]
    assert panel_axis(panel([0.0, 0.0], log=True))["log"] is False   # nothing positive to show


def test_flat_or_empty_panels():
    axis = panel_axis(panel([2.0]))
    assert axis["y"] == [1.8, 2.2] and axis["x"] == [1, 2]
    # a constant LR of 0.01: an axis around it (a fixed +-0.5 drew it on -0.4..0.4, as 0)
    axis = panel_axis(panel([0.01] * 5))
    assert axis["y"] == [0.009000000000000001, 0.011]
    assert [label for _, label in axis["y_ticks"]] == ["0.009", "0.0095", "0.01", "0.0105",
                                                       "0.011"]
    assert panel_axis(panel([0.0, 0.0]))["y"] == [-0.5, 0.5]          # around 0: +-0.5
    assert panel_axis(panel([0.01, 0.01], log=True))["y"] == [-2.5, -1.5]   # a decade
    assert panel_axis(panel([math.nan, math.inf])) is None


def test_spread():
    assert min_median_max([3.0, None, 1.0, math.nan, 2.0, 10.0]) == {
        "min": 1.0, "median": 2.5, "max": 10.0}
    assert min_median_max([math.inf, None]) is None
    steps, stats = per_step([[1, 2], [1, 2], [1, 2]], [[1.0, 5.0], [2.0, 4.0], [3.0, 6.0]])
    assert steps == [1, 2] and stats == {"min": [1.0, 4.0], "median": [2.0, 5.0],
                                         "max": [3.0, 6.0]}
    steps, stats = per_step([[1, 2], [2, 3]], [[1.0, math.nan], [4.0, 5.0]])
    assert steps == [1, 2, 3] and stats["median"] == [1.0, 4.0, 5.0]


def test_a_rank_whose_value_is_not_finite_is_named_beside_the_spread():
    spread = rank_spread({0: 2.0, 1: math.nan, 2: 2.4, 3: math.inf, 4: None})
    assert spread == {"min": 2.0, "median": 2.2, "max": 2.4,
                      "nonfinite": {"1": "NaN", "3": "Infinity"}}
    assert spread_text(spread) == "min/median/max 2/2.2/2.4, nan on rank 1, inf on rank 3"
    none_finite = rank_spread({0: math.nan, 1: math.nan})
    assert spread_text(none_finite) == "nan on ranks 0, 1"
    assert spread_text(rank_spread({0: 1.0, 1: 3.0})) == "min/median/max 1/2/3"
    assert rank_spread({0: None}) is None
