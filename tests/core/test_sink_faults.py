"""A sink that cannot write never takes training down: a real small filesystem that fills up,
a run directory removed mid-run, a failing view; said once, retried, resumed."""
import io
import math
import shutil
import uuid

import pytest

from mindwatch import FrameworkHooks, Monitor, records
from mindwatch.sinks import jsonl
from mindwatch.sinks.base import Sink
from mindwatch.sinks.sink_set import SinkError


def _fill(directory, leave_bytes):
    """Fill the filesystem of ``directory`` until about ``leave_bytes`` are free."""
    filler = directory / f"filler-{uuid.uuid4().hex}"
    free = shutil.disk_usage(directory).free
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(free - leave_bytes, 0))
    return filler


def _lines(path):
    return path.read_bytes().split(b"\n")


def test_a_full_disk_is_said_once_and_the_log_resumes_without_glued_lines(small_fs, clock):
    out = io.StringIO()
    monitor = Monitor(str(small_fs / "run"), clock=clock, stream=out, hardware_interval_s=None,
                      print_interval=1000)
    filler = _fill(small_fs, leave_bytes=6_000)
    for step in range(1, 301):                       # ~200 bytes a record: the disk fills
        clock.advance(0.1)
        assert monitor.observe(step=step, loss=2.0, lr=0.1, grad_norm=1.0) == []
    said = [line for line in out.getvalue().splitlines() if "cannot be written" in line]
    assert len(said) == 1, out.getvalue()
    assert "run log" in said[0] and str(small_fs / "run" / "rank_0.jsonl") in said[0]
    assert "No space left on device" in said[0]

    filler.unlink()                                  # space again: the log resumes
    for step in range(301, 311):
        clock.advance(0.1)
        monitor.observe(step=step, loss=2.0, lr=0.1, grad_norm=1.0)
    monitor.close()
    assert "writes again" in out.getvalue()

    decoded, torn = [], 0
    for raw in _lines(small_fs / "run" / "rank_0.jsonl"):
        if not raw:
            continue
        assert raw.count(b'{"kind"') <= 1, raw       # never two records glued in one line
        try:
            decoded.append(records.decode(raw.decode("utf-8")))
        except ValueError:
            torn += 1
    assert torn <= 1                                 # at most the line cut by the full disk
    steps = [r["step"] for r in decoded if r["kind"] == "step"]
    assert steps[:5] == [1, 2, 3, 4, 5] and steps[-10:] == list(range(301, 311))
    notices = [r["message"] for r in decoded if r["kind"] == "notice"]
    assert any("writes again" in n and "records lost" in n for n in notices)
    assert decoded[-1]["kind"] == "end" and decoded[-1]["reason"] == "completed"


def test_a_removed_run_directory_is_made_again(tmp_path, clock, monkeypatch):
    monkeypatch.setattr(jsonl, "RECHECK_S", 0.0)     # notice at once, not within a second
    run_dir = tmp_path / "run"
    out = io.StringIO()
    monitor = Monitor(str(run_dir), clock=clock, stream=out, hardware_interval_s=None)
    for step in range(1, 6):
        monitor.observe(step=step, loss=1.0)
    shutil.rmtree(run_dir)                           # an operator's clean-up script, mid-run
    for step in range(6, 11):
        monitor.observe(step=step, loss=1.0)
    monitor.close()
    lines = [records.decode(raw.decode()) for raw in _lines(run_dir / "rank_0.jsonl") if raw]
    assert lines[0]["kind"] == "run"                 # a log that reads as a run log again
    assert [r["step"] for r in lines if r["kind"] == "step"] == [6, 7, 8, 9, 10]
    assert lines[-1]["kind"] == "end" and lines[-1]["steps"] == 10


class _Broken(Sink):
    """A view whose storage fails for a while (a network mount that went away)."""

    def __init__(self):
        self.failing = True
        self.written = []

    @property
    def name(self):
        return "broken view /mnt/gone"

    def write(self, record):
        if self.failing:
            raise OSError(5, "Input/output error")
        self.written.append(record["kind"])


def _with_broken_view(tmp_path, clock, out, **settings):
    broken = _Broken()
    hooks = FrameworkHooks(sinks={"mindinsight": lambda context: broken})
    monitor = Monitor(str(tmp_path), clock=clock, stream=out, hardware_interval_s=None,
                      mindinsight=True, framework=hooks, **settings)
    return monitor, broken


def test_a_failing_view_leaves_training_and_the_run_log_alone(tmp_path, clock):
    out = io.StringIO()
    monitor, broken = _with_broken_view(tmp_path, clock, out)
    for step in range(1, 21):
        monitor.observe(step=step, loss=1.0)
    broken.failing = False
    monitor.observe(step=21, loss=1.0)
    monitor.close()
    text = out.getvalue()
    assert text.count("broken view /mnt/gone cannot be written (OSError") == 1
    # run + 20 steps + the notice about its own failure
    assert "broken view /mnt/gone writes again (22 records lost" in text
    assert broken.written[:2] == ["step", "notice"] and broken.written[-1] == "end"
    log = (tmp_path / "rank_0.jsonl").read_text().splitlines()
    assert sum('"kind":"step"' in line for line in log) == 21


def test_raise_stops_cleanly_with_end_reason_error(tmp_path, clock):
    out = io.StringIO()
    monitor, _broken = _with_broken_view(tmp_path, clock, out, on_sink_error="raise")
    with pytest.raises(SinkError, match="broken view /mnt/gone"):
        monitor.observe(step=1, loss=1.0)
    assert monitor.stop_requested is not None
    assert monitor.observe(step=2, loss=1.0) == []   # raised once; the loop decides
    monitor.close()
    end = [records.decode(line) for line in (tmp_path / "rank_0.jsonl").read_text().splitlines()
           ][-1]
    assert end["kind"] == "end" and end["reason"] == "error"
    assert "broken view /mnt/gone cannot be written" in end["error"]
    assert end["stopped_by"]["anomaly"] == "sink_error"


def test_a_checkpoint_that_cannot_be_written_is_said_and_the_policy_still_stops(small_fs,
                                                                                 clock):
    def save(step, reason):                          # as save_atomically: temporary, rename
        path = small_fs / "run" / "checkpoints" / f"{reason}_step{step}_rank0.ckpt"
        path.parent.mkdir(exist_ok=True)
        temporary = path.with_suffix(".tmp")
        try:
            temporary.write_bytes(b"\1" * 1_000_000)  # larger than the whole filesystem
        except OSError:
            temporary.unlink()
            raise
        temporary.rename(path)
        return str(path)

    out = io.StringIO()
    monitor = Monitor(str(small_fs / "run"), clock=clock, stream=out, hardware_interval_s=None,
                      framework=FrameworkHooks(save_checkpoint=save))
    monitor.observe(step=1, loss=1.0)
    [found] = monitor.observe(step=2, loss=math.nan)
    assert found.stops and found.checkpoint is None    # checkpoint_and_stop: still stops
    monitor.close()
    text = out.getvalue()
    assert text.count("checkpoint at step 2 could not be written (OSError") == 1
    report = (small_fs / "run" / "anomalies" / "step2_rank0.md").read_text()
    assert "the checkpoint could not be written: OSError" in report


def test_an_anomaly_report_on_a_full_disk_is_said_once(small_fs, clock):
    out = io.StringIO()
    monitor = Monitor(str(small_fs / "run"), clock=clock, stream=out, hardware_interval_s=None,
                      on_anomaly="stop")
    monitor.observe(step=1, loss=1.0)
    filler = _fill(small_fs, leave_bytes=0)
    [first] = monitor.observe(step=2, loss=math.nan)
    [second] = monitor.observe(step=3, loss=math.inf)
    assert first.stops and first.report is None and second.report is None
    filler.unlink()
    monitor.close()
    text = out.getvalue()
    assert text.count("the anomaly report for step 2 could not be written (OSError") == 1
    assert "report for step 3" not in text                       # the same problem: said once
    assert not list((small_fs / "run" / "anomalies").glob("*.tmp-*"))
