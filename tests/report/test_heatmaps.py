"""The report's state heatmaps as data: bins of consecutive state records keep their
largest value (NaN and +inf over any number), the colour codes follow log10 between the
grid's extremes, an anomaly is marked on its layer's cell, and the page stays small for a
hundred layers over a million steps."""
import base64
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from mindwatch.report import heatmaps
from mindwatch.report.heatmaps import (
    INF,
    MAX_COLUMNS,
    NAN,
    NO_DATA,
    NOT_POSITIVE,
    TOP,
    bin_edges,
    heatmap,
)
from mindwatch.runlog.states import StateColumns


def _states(steps, layers):
    """``layers``: name -> function of the state record's position -> update_ratio."""
    states = StateColumns()
    for i, step in enumerate(steps):
        states.add({"kind": "state", "step": step, "layers": {
            name: {"update_ratio": ratio(i), "weight_norm": 1.0}
            for name, ratio in layers.items() if ratio(i) is not None}})
    return states


def _cells(found):
    return list(base64.b64decode(found["cells"]))


def test_each_cell_is_one_record_when_few_and_codes_follow_log10():
    states = _states([10, 20, 30, 40], {
        "blocks.10.mlp": lambda i: [1e-4, 1e-3, 1e-2, 0.0][i],
        "blocks.2.mlp": lambda i: [math.nan, math.inf, None, 1e-3][i]})
    found = heatmap(states, "update_ratio", "ratio", 0, [])
    assert found["rows"] == ["blocks.2.mlp", "blocks.10.mlp"]          # natural order
    assert found["columns"] == 4 and found["steps"] == [[10, 10], [20, 20], [30, 30], [40, 40]]
    assert found["scale"] == [-4.0, -2.0] and found["labels"] == ["1.000e-04", "0.01"]
    mid = round(TOP / 2)
    assert _cells(found) == [NAN, INF, NO_DATA, mid,           # blocks.2: absent at 30
                             0, mid, TOP, NOT_POSITIVE]       # blocks.10: a withheld update 0


def test_bins_keep_the_largest_value_and_nan_wins():
    steps = list(range(100, 100 * 1201, 100))                  # 1200 records into 600 bins
    spike = {701: 5e-2, 702: math.nan, 703: 1e-2}
    states = _states(steps, {"a": lambda i: spike.get(i, 1e-3)})
    found = heatmap(states, "update_ratio", "ratio", 0, [])
    cells = _cells(found)
    assert found["columns"] == MAX_COLUMNS and len(cells) == MAX_COLUMNS
    assert found["steps"][350] == [70100, 70200]               # records 700 and 701
    assert cells[350] == TOP                       # 5e-2 beside 1e-3: the bin shows the spike
    assert cells[351] == NAN and cells.count(NAN) == 1          # NaN beside 1e-2
    assert set(cells) == {0, TOP, NAN}
    assert bin_edges(1200, 600)[:3] == [0, 2, 4]


def test_an_anomaly_is_marked_on_its_layers_cell_and_others_on_the_step():
    states = _states([10, 20, 30, 40], {"a": lambda i: 1e-3, "b": lambda i: 1e-3})
    anomalies = [
        {"kind": "anomaly", "rank": 0, "anomaly": "update_ratio", "step": 30, "layer": "b",
         "message": "layer b: ..."},
        {"kind": "anomaly", "rank": 0, "anomaly": "loss_spike", "step": 25, "message": "x"},
        {"kind": "anomaly", "rank": 1, "anomaly": "update_ratio", "step": 20, "layer": "a",
         "message": "another rank's"},
        {"kind": "anomaly", "rank": 0, "anomaly": "attention_logit", "step": 20,
         "layer": "blocks.0.attn", "message": "on the max_logit heatmap only"}]
    found = heatmap(states, "update_ratio", "ratio", 0, anomalies)
    assert [(m["row"], m["col"], m["step"]) for m in found["marks"]] == [(1, 2, 30)]
    assert [(t["col"], t["kind"]) for t in found["ticks"]] == [(2, "loss_spike")]  # after 25


def test_a_hundred_layers_over_a_million_steps_is_small():
    steps = range(100, 1_000_001, 100)                          # the default state_interval
    def ratio(n):
        return lambda i: 1e-3 * (1 + (i * n) % 7)
    layers = {f"blocks.{n}.mlp": ratio(n) for n in range(100)}
    found = heatmap(_states(steps, layers), "update_ratio", "ratio", 0, [])
    assert len(found["rows"]) == 100 and found["columns"] == MAX_COLUMNS
    assert len(found["cells"]) == 4 * math.ceil(100 * MAX_COLUMNS / 3)     # 80 KB of base64
    assert found["steps"][-1] == [998_400, 1_000_000]


def _cell_by_cell(states, quantity):
    """The heatmap's cells as _bin_value and _code give them, one cell at a time."""
    names = sorted(states.series[quantity], key=heatmaps._natural)
    edges = bin_edges(len(states.steps), min(len(states.steps), MAX_COLUMNS))
    grid = [[heatmaps._bin_value(states.column(quantity, name)[edges[b]:edges[b + 1]])
             for b in range(len(edges) - 1)] for name in names]
    logs = [math.log10(v) for row in grid for v in row if 0 < v < math.inf]
    low, high = (min(logs), max(logs)) if logs else (0.0, 1.0)
    if high == low:
        low, high = low - 0.5, high + 0.5
    return [heatmaps._code(v, low, high - low) for row in grid for v in row]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 1500), st.lists(st.sampled_from(
    ["plain", "tiny", "nan", "inf", "zero", "negative", "gap", "wide"]), min_size=1, max_size=5))
def test_plain_rows_taken_in_c_give_the_cells_of_cell_by_cell(count, kinds):
    """Rows of positive numbers (binned with C's max, coded in one expression) and rows with
    NaN, inf, zero, negatives or gaps (cell by cell) give the cells of _bin_value/_code."""
    def value(kind, i):
        plain = 1e-3 * (1 + (i * 7919) % 97)
        special = {"nan": math.nan, "inf": math.inf, "zero": 0.0, "negative": -plain,
                   "gap": None}
        if kind in special and i % 53 == 5:
            return special[kind]
        return {"tiny": plain * 1e-30, "wide": plain * 10 ** (i % 9)}.get(kind, plain)
    layers = {f"layer{n}.{kind}": (lambda i, kind=kind: value(kind, i))
              for n, kind in enumerate(kinds)}
    states = _states(list(range(10, 10 * (count + 1), 10)), layers)
    found = heatmap(states, "update_ratio", "ratio", 0, [])
    assert _cells(found) == _cell_by_cell(states, "update_ratio")
