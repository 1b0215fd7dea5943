"""job.jsonl written by rank 0 from the ranks' exchange (issue #43): real Monitors on threads
whose exchange is a real SUM over their vectors (tests/thread_ranks.py)."""
import json
import math
import os

import pytest

from mindwatch import Monitor
from mindwatch.basics.rank_set import parse_rank_set, rank_set
from mindwatch.job import fields as job_fields
from thread_ranks import run_ranks

HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _train(poison_rank=None, poison_step=None, steps=30, slow_rank=None):
    def body(monitor, rank):
        for step in range(1, steps + 1):
            loss = 2.0 - 0.01 * step + 0.001 * rank
            if rank == poison_rank and step == poison_step:
                loss = float("nan")
            found = monitor.end_step(step=step, loss=loss, lr=0.01, grad_norm=1.0 + rank,
                                     step_time_s=0.1 + 0.01 * rank,
                                     data_time_s=0.05 if rank == slow_rank else 0.001)
            if any(a.stops for a in found) or monitor.stop_requested:
                break
        monitor.close()
        return monitor.last_step
    return body


def test_rank_sets_read_back():
    assert rank_set([7, 0, 1, 2, 3, 3]) == "0-3,7"
    assert rank_set([]) == ""
    assert parse_rank_set("0-3,7") == [0, 1, 2, 3, 7]


def test_job_log_of_four_ranks(tmp_path):
    log_dir = str(tmp_path / "run")
    last = run_ranks(4, _train(poison_rank=2, poison_step=20), log_dir=log_dir, hosts=HOSTS,
                     on_anomaly={"loss_nonfinite": "stop"})
    assert last == [20] * 4
    records = _read(os.path.join(log_dir, "job.jsonl"))
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "run" and kinds[-1] == "end"
    run = records[0]
    assert run["world_size"] == 4
    assert run["hosts"] == [{"host": "node-a", "ranks": "0-1", "devices": [0, 1]},
                            {"host": "node-b", "ranks": "2-3", "devices": [2, 3]}]
    steps = [r for r in records if r["kind"] == "job_step"]
    assert [r["step"] for r in steps] == list(range(1, 21))
    fifth = steps[4]
    assert math.isclose(fifth["loss"], 2.0 - 0.05 + 0.0015, rel_tol=1e-6)
    assert fifth["grad_norm"] == 4.0
    spread = fifth["step_time_s"]
    assert (spread["min_rank"], spread["max_rank"]) == (0, 3)
    assert math.isclose(spread["max"], 0.13, rel_tol=1e-6)
    assert math.isclose(spread["median"], 0.115, rel_tol=1e-6)
    assert steps[-1]["loss"] == "NaN" and steps[-1]["ranks"] == "2"
    events = [r for r in records if r["kind"] == "event"]
    assert len(events) == 1
    event = events[0]
    assert event["step"] == 20 and event["kinds"] == ["loss_nonfinite"]
    assert (event["ranks"], event["rank_count"]) == ("2", 1)
    assert (event["origin_rank"], event["origin_host"], event["origin_device"]) == (2, "node-b", 2)
    assert "stop" in event["actions"]
    end = records[-1]
    assert end["reason"] == "stopped" and end["steps"] == 20
    assert 0 < end["goodput"]["share"] <= 1
    bins = [r for r in records if r["kind"] == "job_ranks"]
    assert [(b["step_from"], b["step"]) for b in bins] == [(1, 10), (11, 20)]
    assert [round(v, 6) for v in bins[0]["step_time_s"]] == [0.1, 0.11, 0.12, 0.13]


def test_a_straggler_reaches_the_job_log_a_step_late(tmp_path):
    log_dir = str(tmp_path / "run")
    run_ranks(4, _train(slow_rank=3, steps=40), log_dir=log_dir, hosts=HOSTS,
              straggler_window=10)
    records = _read(os.path.join(log_dir, "job.jsonl"))
    events = [r for r in records if r["kind"] == "event"]
    assert [(e["kinds"], e["ranks"], e["origin_rank"]) for e in events] == \
        [(["straggler"], "3", 3)]
    steps = {r["step"]: r for r in records if r["kind"] == "job_step"}
    assert steps[events[0]["step"]]["data_time_s"]["max_rank"] == 3


def test_a_row_reduces_as_declared():
    import numpy as np
    rows = np.stack([job_fields.row({"loss": 1.0, "step_time_s": 0.2, "grad_norm": 3.0},
                                    100.0, []),
                     job_fields.row({"loss": 3.0, "step_time_s": float("nan")}, None,
                                    ["straggler"])])
    reduced = job_fields.reduce(rows)
    assert reduced["loss"] == 2.0 and reduced["grad_norm"] == 3.0
    assert reduced["step_time_s"] == {"min": 0.2, "min_rank": 0, "median": 0.2, "max": 0.2,
                                      "max_rank": 0, "nonfinite": "1"}
    assert reduced["memory_mb"]["max"] == 100.0 and reduced["data_time_s"] is None
    assert reduced["ranks"] == "1"


def test_a_resumed_job_appends_a_segment_and_a_fresh_one_refuses_the_log(tmp_path):
    log_dir = str(tmp_path / "run")
    run_ranks(2, _train(steps=12), log_dir=log_dir)
    for rank in (0, 1):         # only the job log stands in the way
        os.rename(os.path.join(log_dir, f"rank_{rank}.jsonl"), str(tmp_path / f"{rank}.jsonl"))
    with pytest.raises(ValueError, match=r"job\.jsonl already holds a run log"):
        Monitor(log_dir, rank=0, world_size=2)
    for rank in (0, 1):
        os.rename(str(tmp_path / f"{rank}.jsonl"), os.path.join(log_dir, f"rank_{rank}.jsonl"))
    run_ranks(2, _train(steps=12), log_dir=log_dir, resume=True)
    kinds = [r["kind"] for r in _read(os.path.join(log_dir, "job.jsonl"))]
    assert kinds.count("run") == 2 and kinds.count("end") == 2
    assert kinds.count("job_step") == 24


def test_a_job_log_that_cannot_be_written_is_said_once_and_training_goes_on(tmp_path):
    log_dir = tmp_path / "run"
    (log_dir / "job.jsonl").mkdir(parents=True)         # a directory where the file would go
    last = run_ranks(2, _train(steps=25), log_dir=str(log_dir), resume=True)
    assert last == [25, 25]
    rank0 = _read(log_dir / "rank_0.jsonl")
    said = [r["message"] for r in rank0 if r["kind"] == "notice" and "job log" in r["message"]]
    assert len(said) == 1 and "rank logs go on" in said[0]
    assert [r["step"] for r in rank0 if r["kind"] == "step"] == list(range(1, 26))


def test_a_gradient_fault_every_rank_finds_is_stopped_by_its_origin(tmp_path):
    """The reduced norm is NaN on every rank; rank 2's own norm before the reduction names it:
    every rank's end, the job's end and the event name rank 2, and only rank 2 would post."""
    from mindwatch.sinks.alert import wants_alert

    def body(monitor, rank):
        for step in range(1, 13):
            bad = step == 10
            local = [1.0, 1.1, float("nan") if bad else 0.9, 1.2]
            monitor.end_step(step=step, loss=1.0, lr=0.01,
                             grad_norm=float("nan") if bad else 2.0, step_time_s=0.1,
                             local_grad_norms=local)
            if monitor.stop_requested:
                break
        monitor.close()

    log_dir = tmp_path / "run"
    run_ranks(4, body, log_dir=str(log_dir), hosts=HOSTS,
              on_anomaly={"gradient_nonfinite": "stop"})
    for rank in range(4):
        records = _read(log_dir / f"rank_{rank}.jsonl")
        assert records[-1]["stopped_by"] == {"anomaly": "gradient_nonfinite", "step": 10,
                                             "rank": 2}
        posted = [r for r in records if wants_alert(r)]
        assert len(posted) == (2 if rank == 2 else 0)      # its anomaly and its end
    job = _read(log_dir / "job.jsonl")
    assert job[-1]["stopped_by"]["rank"] == 2
    (event,) = [r for r in job if r["kind"] == "event"]
    assert (event["origin_rank"], event["origin_host"], event["ranks"]) == (2, "node-b", "0-3")
