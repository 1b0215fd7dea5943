"""RankLog: the views read its scan; its records are read when first asked for, from the same
bytes; "the value at step N" across ranks is the one of N's last record."""
import builtins
import json
import statistics

from hypothesis import given
from hypothesis import strategies as st

from mindwatch.runlog import read_rank_log
from mindwatch.runlog.steps import StepIndex, last_common_step

RUN = {"kind": "run", "rank": 0, "time": 0.0, "schema": 1, "world_size": 1, "host": "h",
       "pid": 1, "config": {}, "versions": {}}


def _step(step, loss=1.0):
    return {"kind": "step", "rank": 0, "time": 1.0, "step": step, "epoch": 1, "loss": loss,
            "loss_smooth": loss, "lr": 1e-3, "grad_norm": 1.0, "step_time_s": 0.1 * step,
            "skipped": False}


def test_records_are_read_later_from_the_bytes_first_read(tmp_path, monkeypatch):
    path = tmp_path / "rank_0.jsonl"
    anomaly = {"kind": "anomaly", "rank": 0, "time": 2.0, "anomaly": "loss_spike", "step": 2,
               "value": 9.0, "threshold": 4.0, "message": "m", "actions": ["warn"],
               "checkpoint": None, "report": None}
    path.write_text("\n".join(map(json.dumps, [RUN, _step(1), _step(2), anomaly])) + "\n")
    log = read_rank_log(str(path))
    with open(path, "a") as handle:
        handle.write(json.dumps(_step(3)) + "\n")
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    assert log.run["host"] == "h" and log.end is None and len(log.anomalies) == 1
    assert opened == []                              # served by the scan
    assert [r.get("step") for r in log.steps] == [1, 2]   # not the step written since
    assert len(opened) == 1


def _brute(columns):
    """What summary computed before columns: a dict per rank of step -> last record."""
    by_rank = [{step: i for i, step in enumerate(steps)} for steps in columns]
    common = set.intersection(*(set(d) for d in by_rank))
    return max(common) if common else None


@given(st.lists(st.lists(st.integers(0, 30), max_size=25), min_size=1, max_size=4),
       st.booleans())
def test_last_common_step_and_positions(columns, ascend):
    if ascend:
        columns = [sorted(set(c)) for c in columns]
    indexes = [StepIndex(c) for c in columns]
    last = last_common_step(indexes)
    assert last == _brute(columns)
    if last is not None:
        for steps, index in zip(columns, indexes, strict=True):
            assert index.position(last) == max(i for i, s in enumerate(steps) if s == last)
    for steps, index in zip(columns, indexes, strict=True):
        times = [0.1 * i if i % 3 else None for i in range(len(steps))]
        by_step = {step: times[i] for i, step in enumerate(steps)}
        expected = [t for t in by_step.values() if t is not None]
        assert list(index.values(times)) == expected
        if expected:
            assert statistics.median(index.values(times)) == statistics.median(expected)
