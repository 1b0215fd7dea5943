"""State records as columns: taken a row at a time where they allow it (StateColumns), the
columns, and the order in which quantities and layers first appear, are those of taking
every value alone; read from a file, with or without msgspec, kept or only counted, with or
without the charts' columns, every other figure of the scan is the same."""
import json
import math
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fast_path import RUN, hardware, outcome, standard, step, write  # noqa: F401

from mindwatch.basics.numbers import to_number
from mindwatch.runlog import FIRST, NONE, fast, read_rank_log, read_run
from mindwatch.runlog.scan import CHART_FIELDS
from mindwatch.runlog.states import ABSENT, StateColumns


def reference(records):
    """Every value alone, as StateColumns took them before rows: (steps, series)."""
    steps, series = [], {}
    for record in records:
        if type(record.get("step")) is not int:
            continue
        position = len(steps)
        steps.append(record["step"])
        for group in ("layers", "activations"):
            entries = record.get(group)
            if not isinstance(entries, dict):
                continue
            for name, fields in entries.items():
                if not isinstance(fields, dict):
                    continue
                for quantity, value in fields.items():
                    number = to_number(value)
                    if number is None:
                        continue
                    column = series.setdefault(str(quantity), {}).setdefault(name, [])
                    column.extend([ABSENT] * (position - len(column)))
                    if len(column) == position:
                        column.append(number)
    return steps, series


def as_lists(states):
    """The columns as plain lists, in their order (NaN as a string, so that it compares)."""
    def plain(values):
        return ["nan" if math.isnan(v) else v for v in values]
    return list(states.steps), [(quantity, [(name, plain(column)) for name, column in
                                            names.items()])
                                for quantity, names in states.series.items()]


VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none(),
                   st.sampled_from(["NaN", "Infinity", "nan", 3, True, [1.0]]))
LAYER_NAMES = st.lists(st.sampled_from(["a", "b.0", "b.1", "c"]), min_size=0, max_size=4,
                       unique=True)
QUANTITIES = st.lists(st.sampled_from(["weight_norm", "update_ratio", "m_norm", "x"]),
                      min_size=1, max_size=3, unique=True)


@st.composite
def state_records(draw):
    """Records of one run: mostly the same layers and fields (the row path), sometimes a
    change of layers, of fields or of their order, a value that is no float, a layer that is
    no object, activations, a step that is no int."""
    names, quantities = draw(LAYER_NAMES), draw(QUANTITIES)
    found = []
    for position in range(draw(st.integers(0, 8))):
        if draw(st.integers(0, 4)) == 0:
            names, quantities = draw(LAYER_NAMES), draw(QUANTITIES)
        floats = draw(st.booleans())
        layers = {name: {q: draw(st.floats(allow_nan=True, allow_infinity=True) if floats
                                 else VALUES) for q in quantities} for name in names}
        if names and draw(st.integers(0, 6)) == 0:
            layers[names[0]] = draw(st.sampled_from([None, 1.0, [], {"m_norm": 2.0}]))
        record = {"kind": "state", "step": draw(st.sampled_from([position, position, "7"])),
                  "layers": layers}
        if draw(st.integers(0, 3)) == 0:
            record["activations"] = {"cell": {"max_abs": draw(VALUES), "rms": 1.5}}
        found.append(record)
    return found


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state_records())
def test_rows_make_the_columns_values_alone_make(found):
    states = StateColumns()
    for record in found:
        states.add(record)
    steps, series = reference(found)
    assert as_lists(states) == (steps, [(q, [(n, ["nan" if math.isnan(v) else v for v in c])
                                              for n, c in names.items()])
                                        for q, names in series.items()])


def test_a_long_run_of_one_model_is_taken_in_rows_and_cut_into_columns():
    states = StateColumns()
    layers = [f"blocks.{i}.mlp" for i in range(300)]
    for n in range(1, 51):
        states.add({"step": n, "layers": {name: {"weight_norm": float(i), "update_ratio":
                                                 n * 1e-3} for i, name in enumerate(layers)}})
    assert states._rows                       # pending, one block per quantity
    assert states.column("weight_norm", "blocks.7.mlp") == array("d", [7.0] * 50)
    assert states.column("update_ratio", "blocks.299.mlp")[-1] == 0.05
    assert list(states.series) == ["weight_norm", "update_ratio"] and not states._rows


# -- from files ------------------------------------------------------------------------------
def state(n, layers=3, **fields):
    return {"kind": "state", "rank": 0, "time": 2.7 + n, "step": n, "weight_norm": 9.5,
            "update_norm": 0.25, "layers": {
                f"blocks.{i}.attn": {"weight_norm": 1.0 + i, "update_norm": 1e-3 * n,
                                     "update_ratio": 1e-3 * n / (1 + i), "grad_norm": 0.5,
                                     "m_norm": 0.01, "v_norm": 1e-6}
                for i in range(layers)}, **fields}


DEEP = b"[" * 300 + b"]" * 300
STATE_LOGS = {
    "clean": [RUN] + [record for n in range(1, 301) for record in
                      ([step(n), state(n)] if n % 10 == 0 else [step(n)])],
    "many layers": [RUN] + [record for n in range(1, 41) for record in
                            ([step(n), state(n, layers=300)] if n % 4 == 0 else [step(n)])],
    "odd states": [
        RUN, step(1), state(1), step(2), state(2, layers=2),
        dict(state(3), layers={"a": {"weight_norm": "NaN", "v_norm": None}, "b": 3}),
        dict(state(4), activations={"blocks.0.attn": {"max_logit": 120.0},
                                    "blocks.0.mlp": {"max_abs": "Infinity", "rms": 2}}),
        dict(state(5), note="a field this version does not know"),
        dict(state(6), step="6"), dict(state(7), layers=[1, 2]), state(8, layers=0),
        {"kind": "state", "rank": 0, "time": 3.0, "step": 9, "layers": {}},   # no norms
        json.dumps(state(10)).replace('"grad_norm": 0.5', '"grad_norm": ' +
                                      DEEP.decode()).encode() + b"\n",
        json.dumps(state(11)).replace('"update_norm": 0.25',
                                      '"update_norm": [[1]]').encode() + b"\n",
        json.dumps(state(12)).replace("0.01", "1e400").encode() + b"\n",
        b'{"kind":"state","rank":0,"time":1,"step":13,"weight_norm":1,"update_norm":1,'
        b'"layers":{"a":{"weight_norm":NaN}}}\n', hardware(13), step(14), state(14)],
}


@pytest.mark.skipif(fast.msgspec is None, reason="msgspec is not installed")
@pytest.mark.parametrize("name", sorted(STATE_LOGS))
def test_state_lines_read_the_same_on_both_paths(tmp_path, standard, name):  # noqa: F811
    path = write(tmp_path, STATE_LOGS[name])

    def read():
        log = read_rank_log(path)
        return log.scan, log.skipped, log.skipped_at, log.records
    slow, quick = standard(read)
    assert quick == slow and "Error" not in quick


@pytest.mark.parametrize("name", sorted(STATE_LOGS))
def test_what_a_view_leaves_out_changes_nothing_else(tmp_path, name):
    path = write(tmp_path, STATE_LOGS[name])
    full = read_rank_log(path)
    counted = read_rank_log(path, states=False)
    bare = read_rank_log(path, states=False, charts=False)
    assert len(full.scan.states) == full.scan.state_count == counted.scan.state_count > 0
    assert len(counted.scan.states) == 0 and (counted.skipped, counted.skipped_at) == (
        full.skipped, full.skipped_at)
    full.scan.states = counted.scan.states
    assert repr(counted.scan) == repr(full.scan)
    assert set(bare.scan.steps) == set(full.scan.steps) - set(CHART_FIELDS)
    assert bare.scan.hardware[next(iter(bare.scan.hardware))] == [] and not bare.scan.devices
    for name_ in bare.scan.steps:
        assert bare.scan.steps[name_] == full.scan.steps[name_]
    for ours, theirs in zip(bare.scan.segments, full.scan.segments, strict=True):
        assert repr(ours) == repr(theirs)
    assert (bare.scan.medians, bare.scan.step_time_median, bare.scan.skipped_steps) == (
        full.scan.medians, full.scan.step_time_median, full.scan.skipped_steps)


def test_a_report_keeps_the_first_ranks_states_even_when_rank_0_has_none(tmp_path):
    """The heatmaps draw the first rank with state records; when rank 0 logged none, the
    one that did is read again with them."""
    for rank, logs in ((0, False), (1, True), (2, True)):
        lines = [dict(RUN, rank=rank)]
        for n in range(1, 21):
            lines.append(dict(step(n), rank=rank))
            if logs and n % 5 == 0:
                lines.append(dict(state(n), rank=rank))
        (tmp_path / f"rank_{rank}.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines))
    first = read_run(str(tmp_path), states=FIRST)
    assert [len(log.scan.states) for log in first.ranks] == [0, 4, 0]
    assert [log.scan.state_count for log in first.ranks] == [0, 4, 4]
    assert first.ranks[1].scan.states == read_rank_log(str(tmp_path / "rank_1.jsonl")).scan.states
    assert [len(log.scan.states) for log in read_run(str(tmp_path), states=NONE).ranks] == [0] * 3
    with pytest.raises(ValueError, match="states must be one of"):
        read_run(str(tmp_path), states="some")
