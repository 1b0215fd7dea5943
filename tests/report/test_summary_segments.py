"""`mindwatch summary` of a run resumed into its log directory: the verdict (headline and exit
status) is the latest segment's, and every segment is listed with its steps, ending, losses
and anomalies. The logs are written by the real core ``Monitor`` (``resume=True`` appends a
segment), read by the real command."""
import io
import json
import math

import pytest

from mindwatch import Monitor, records
from mindwatch.cli import main
from mindwatch.report.summary import summarize
from mindwatch.runlog import fast, read_run, reader


def _segment(run_dir, clock, losses, *, first=1, rank=0, world_size=1, skipped=(), **settings):
    """One segment: a monitor (resumed into ``run_dir``) observes ``losses`` from step
    ``first`` on until it asks to stop, then closes (its ``end`` record)."""
    monitor = Monitor(str(run_dir), rank=rank, world_size=world_size, clock=clock,
                      stream=io.StringIO(), resume=True, hardware_interval_s=None, **settings)
    for step, loss in enumerate(losses, start=first):
        clock.advance(0.5)
        monitor.observe(step=step, epoch=1, loss=loss, grad_norm=1.0, skipped=step in skipped)
        if monitor.stop_requested:
            break
    monitor.close()


def _kill(run_dir, rank=0):
    """The log as a SIGKILL after the last step leaves it: everything but the `end` record."""
    log = run_dir / f"rank_{rank}.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    assert records.decode(lines[-1])["kind"] == "end"
    log.write_text("".join(lines[:-1]), encoding="utf-8")


def _summary(run_dir, capsys):
    """The command's exit status, its text, and its JSON (which must agree on the status)."""
    code = main(["summary", str(run_dir)])
    text = capsys.readouterr().out
    assert main(["summary", str(run_dir), "--json"]) == code
    result = json.loads(capsys.readouterr().out)
    assert result["exit_code"] == code
    return code, text, result


def _ranges(rank):
    return [(s["first_step"], s["last_step"], s["end"]) for s in rank["segments"]]


def test_a_clean_resume_after_an_anomaly_stop_is_healthy(tmp_path, clock, capsys):
    run = tmp_path / "run"
    _segment(run, clock, [3.0, 2.5, 2.0, 1.5, 1.25, math.nan])    # NaN: checkpoint and stop
    _segment(run, clock, [1.0, 0.8, 0.6, 0.5], first=7)
    code, text, result = _summary(run, capsys)
    assert code == 0
    assert text.splitlines() == [
        f"{run}: HEALTHY (the latest of 2 segments; 1 anomaly in earlier ones)",
        "  rank 0: 4 steps (steps 7-10), completed in 2.00 s; loss 1 -> 1.93 (smoothed)",
        "    segment 1 (steps 1-6, stopped in 3.00 s), earlier: loss 3 -> 1.25; 1 anomaly",
        "      loss_nonfinite at step 6: loss is nan at step 6 [checkpoint+stop]",
        "    segment 2 (steps 7-10, completed in 2.00 s), latest: loss 1 -> 0.5; no anomaly",
        "  goodput 100.0% of 5.00 s: no time lost"]
    assert (result["verdict"], result["healthy"], result["anomalies"]) == ("HEALTHY", True, 0)
    assert (result["segments"], result["earlier_anomalies"]) == (2, 1)
    [rank] = result["ranks"]
    assert rank["first_loss"] == 1.0 and rank["end"] == "completed"       # the latest's
    assert rank["elapsed_s"] == 2.0 and rank["anomalies"] == []
    assert (rank["steps"], rank["last_step"]) == (4, 10)       # the latest segment's own
    first, latest = rank["segments"]
    assert first == {
        "segment": 1, "latest": False, "first_step": 1, "last_step": 6, "steps": 6,
        "step_records": 6,
        "end": "stopped", "elapsed_s": 3.0, "first_loss": 3.0, "last_loss": 1.25,
        "last_loss_smooth": first["last_loss_smooth"], "skipped_steps": 0, "rewinds": [],
        "anomalies": [{"anomaly": "loss_nonfinite", "step": 6, "actions": ["checkpoint", "stop"],
                       "message": "loss is nan at step 6"}],
        "events": [{"step": 6, "kinds": ["loss_nonfinite"], "actions": ["checkpoint", "stop"],
                    "checkpoint": None, "report": first["events"][0]["report"],
                    "message": "loss is nan at step 6", "replay_verdict": None,
                    "line": "loss_nonfinite at step 6: loss is nan at step 6 [checkpoint+stop]"}],
        "unwatched": []}
    assert first["events"][0]["report"].endswith("step6_rank0.json")
    assert (latest["segment"], latest["latest"], latest["first_step"], latest["last_step"],
            latest["first_loss"], latest["last_loss"], latest["anomalies"]) == (
        2, True, 7, 10, 1.0, 0.5, [])
    assert latest["last_loss_smooth"] == rank["last_loss_smooth"]


def test_an_anomaly_in_the_latest_segment_is_the_verdict(tmp_path, clock, capsys):
    run = tmp_path / "run"
    _segment(run, clock, [3.0, 2.0, 1.0])
    _segment(run, clock, [0.9, math.nan, 0.7], first=4, on_anomaly="warn")
    code, text, result = _summary(run, capsys)
    assert code == 1 and result["verdict"] == "1 ANOMALY"
    assert (result["anomalies"], result["earlier_anomalies"]) == (1, 0)
    assert text.splitlines()[0] == f"{run}: 1 ANOMALY (the latest of 2 segments)"
    assert text.splitlines()[2:] == [
        "    segment 1 (steps 1-3, completed in 1.50 s), earlier: loss 3 -> 1; no anomaly",
        "    segment 2 (steps 4-6, completed in 1.50 s), latest: loss 0.9 -> 0.7; 1 anomaly",
        "      loss_nonfinite at step 5: loss is nan at step 5 [warn]",
        "  goodput 100.0% of 3.00 s: no time lost"]
    [rank] = result["ranks"]
    assert [(a["anomaly"], a["step"]) for a in rank["anomalies"]] == [("loss_nonfinite", 5)]
    assert _ranges(rank) == [(1, 3, "completed"), (4, 6, "completed")]
    assert rank["first_loss"] == 0.9


def test_earlier_anomalies_do_not_hide_a_crash_of_the_latest_segment(tmp_path, clock, capsys):
    run = tmp_path / "run"
    _segment(run, clock, [3.0, math.nan])
    _segment(run, clock, [2.0, 1.5], first=3)
    _kill(run)
    code, text, result = _summary(run, capsys)
    assert code == 1 and result["verdict"] == "NO END RECORD (running or crashed)"
    [rank] = result["ranks"]
    assert _ranges(rank) == [(1, 2, "stopped"), (3, 4, "running or crashed (no end record)")]
    assert rank["anomalies"] == [] and result["earlier_anomalies"] == 1
    assert "    segment 2 (steps 3-4, running or crashed (no end record)), latest: " \
           "loss 2 -> 1.5; no anomaly" in text.splitlines()


def test_a_killed_segment_resumed_cleanly_is_healthy(tmp_path, clock, capsys):
    run = tmp_path / "run"
    _segment(run, clock, [3.0, 2.0, 1.0])
    _kill(run)
    _segment(run, clock, [2.5, 2.0], first=2)             # resumed from step 1's checkpoint
    code, text, result = _summary(run, capsys)
    assert code == 0 and result["verdict"] == "HEALTHY"
    [rank] = result["ranks"]
    assert _ranges(rank) == [(1, 3, "crashed (no end record)"), (2, 3, "completed")]
    assert (rank["steps"], rank["last_step"], rank["first_loss"]) == (2, 3, 2.5)
    assert "    segment 1 (steps 1-3, crashed (no end record)), earlier: loss 3 -> 1; " \
           "no anomaly" in text.splitlines()


def test_each_ranks_verdict_is_its_latest_segment(tmp_path, make_clock, capsys):
    run = tmp_path / "run"
    for rank in (0, 1):
        clock = make_clock()
        bad = math.nan if rank == 1 else 2.0
        _segment(run, clock, [3.0, bad, 1.5, 1.0], rank=rank, world_size=2, on_anomaly="warn")
        _segment(run, clock, [0.9, 0.8, 0.7], first=5, rank=rank, world_size=2)
    code, text, result = _summary(run, capsys)
    assert code == 0 and result["verdict"] == "HEALTHY" and result["earlier_anomalies"] == 1
    assert [_ranges(r) for r in result["ranks"]] == [[(1, 4, "completed"), (5, 7, "completed")]] * 2
    assert [[(a["anomaly"], a["step"]) for a in s["anomalies"]]
            for s in result["ranks"][1]["segments"]] == [[("loss_nonfinite", 2)], []]
    assert [r["first_loss"] for r in result["ranks"]] == [0.9, 0.9]
    assert result["spread"]["step"] == 7
    # a job's text (issue #43): the event once, for the job, marked as of the earlier segment
    [line] = [line for line in text.splitlines() if "loss_nonfinite" in line]
    assert line.startswith("  loss_nonfinite at step 2 on rank 1 (host ")
    assert line.endswith(") [warn] (segment 1 of 2)")


def test_withheld_updates_are_counted_in_their_own_segment(tmp_path, clock, capsys):
    run = tmp_path / "run"
    _segment(run, clock, [3.0, 2.0, 1.0], skipped={2, 3})
    _segment(run, clock, [0.9, 0.8], first=4, skipped={5})
    code, text, result = _summary(run, capsys)
    assert code == 0                          # withheld updates alone are no anomaly
    [rank] = result["ranks"]
    assert [s["skipped_steps"] for s in rank["segments"]] == [2, 1]
    assert rank["skipped_steps"] == 1 and result["skipped_steps"] == 1
    assert "; 1 update withheld" in text.splitlines()[1]
    assert "    segment 1 (steps 1-3, completed in 1.50 s), earlier: loss 3 -> 1; " \
           "2 updates withheld; no anomaly" in text.splitlines()


def test_a_run_of_one_segment_says_nothing_of_segments(tmp_path, clock, capsys):
    run = tmp_path / "run"
    _segment(run, clock, [3.0, math.nan, 1.0], on_anomaly="warn")
    code, text, result = _summary(run, capsys)
    assert code == 1 and text.splitlines() == [
        f"{run}: 1 ANOMALY",
        "  rank 0: 3 steps, completed in 1.50 s; loss 3 -> 2.8 (smoothed)",
        "    loss_nonfinite at step 2: loss is nan at step 2 [warn]",
        "  goodput 100.0% of 1.50 s: no time lost"]
    assert (result["segments"], result["earlier_anomalies"]) == (1, 0)
    assert _ranges(result["ranks"][0]) == [(1, 3, "completed")]


@pytest.mark.parametrize("parser", ["msgspec", "json"])
def test_segments_are_found_wherever_the_chunks_cut_the_file(tmp_path, clock, monkeypatch,
                                                             parser):
    """The scan (block by block, with msgspec or the standard parser) finds the segments that
    the records, read whole, hold."""
    if parser == "msgspec" and fast.msgspec is None:
        pytest.skip("msgspec is not installed")
    if parser == "json":
        monkeypatch.setenv(fast.ENV, "json")
    run = tmp_path / "run"
    _segment(run, clock, [3.0, 2.0, math.nan], skipped={2})
    _segment(run, clock, [1.5, 1.0, 0.5], first=3, on_anomaly="warn", skipped={4, 5})
    _segment(run, clock, [0.4, math.nan], first=6, on_anomaly="warn")
    whole = read_run(str(run))
    for log in whole.ranks:
        assert len(log.records) > 10            # read whole: the scan comes from the records
    expected = summarize(whole)
    assert [(s["first_step"], s["last_step"], s["skipped_steps"], len(s["anomalies"]))
            for s in expected["ranks"][0]["segments"]] == [(1, 3, 1, 1), (3, 5, 2, 0),
                                                           (6, 7, 0, 1)]
    for size in (61, 250, 1009, 4 * 2**20):
        monkeypatch.setattr(reader, "CHUNK_BYTES", size)
        assert summarize(read_run(str(run))) == expected, size


@pytest.mark.parametrize("parser", ["msgspec", "json"])
def test_a_resumed_segment_counts_its_own_steps_from_the_step_resumed(tmp_path, clock, capsys,
                                                                      monkeypatch, parser):
    """Steps in sinks of 5 (dataset sink mode: a record numbered by its last step covers 5),
    resumed after step 10: the latest segment trained steps 11-20, its own 10, not the run's
    20 and not its 2 records."""
    if parser == "msgspec" and fast.msgspec is None:
        pytest.skip("msgspec is not installed")
    if parser == "json":
        monkeypatch.setenv(fast.ENV, "json")
    run, consoles = tmp_path / "run", []
    for first in (5, 15):              # steps 1-10, then steps 11-20 after a resume
        consoles.append(io.StringIO())
        monitor = Monitor(str(run), clock=clock, stream=consoles[-1], resume=True,
                          hardware_interval_s=None)
        for step in (first, first + 5):
            clock.advance(2.5)
            monitor.observe(step=step, steps=5, epoch=1, loss=10.0 / step, grad_norm=1.0)
        monitor.close()
    # the console's last line says so too
    assert consoles[0].getvalue().splitlines()[-1] == \
        "[rank 0] training completed after 10 steps in 5.00 s"
    assert consoles[1].getvalue().splitlines()[-1] == \
        "[rank 0] training completed at step 20 after 10 steps in 5.00 s"
    code, text, result = _summary(run, capsys)
    assert code == 0 and text.splitlines()[1].startswith(
        "  rank 0: 10 steps (steps 11-20), completed in ")
    assert text.splitlines()[2].startswith("    segment 1 (steps 1-10, completed in ")
    assert text.splitlines()[3].startswith("    segment 2 (steps 11-20, completed in ")
    [rank] = result["ranks"]
    assert (rank["steps"], rank["last_step"]) == (10, 20)
    assert [(s["first_step"], s["last_step"], s["steps"], s["step_records"])
            for s in rank["segments"]] == [(5, 10, 10, 2), (15, 20, 10, 2)]
