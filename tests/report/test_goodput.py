"""Goodput (runlog/goodput.py) of real run logs written by the core ``Monitor`` on a fake
clock, whose lost time is known by construction: a start-up, a pause between steps (a
"save"), a restart between two segments, a withheld step, a rewind, a slow rank. Read
through the real commands: ``summary`` (text and --json) and ``report``."""
import io
import json
import time

import pytest

from dict_store import DictStore
from mindwatch import Monitor
from mindwatch.cli import main
from mindwatch.framework import FrameworkHooks

STEP = 0.5          # every step's steady time, s
QUIET = dict(hardware_interval_s=None, print_interval=10**6)


def _train(monitor, clock, steps, *, first=1, pause=None, skipped=(), data_time=None,
           loss=lambda step: 1.0, settle=False):
    """``steps`` steps of STEP seconds from step ``first``; ``pause = (step, s)``: that
    much more before that step (a checkpoint save after the step before it)."""
    for step in range(first, first + steps):
        clock.advance(STEP + (pause[1] if pause and pause[0] == step else 0.0))
        monitor.observe(step=step, epoch=1, loss=loss(step), grad_norm=1.0,
                        skipped=step in skipped, data_time_s=data_time)
        if settle:
            monitor.settle_rewind(step=step)


def _monitor(run_dir, clock, **settings):
    return Monitor(str(run_dir), clock=clock, stream=io.StringIO(), resume=True,
                   **{**QUIET, **settings})


def _summary(run_dir, capsys):
    main(["summary", str(run_dir), "--json"])
    result = json.loads(capsys.readouterr().out)
    main(["summary", str(run_dir)])
    line = capsys.readouterr().out.splitlines()[-1]
    return result["goodput"], line


def _lost(goodput):
    return {cause: s for cause, s in goodput["lost_s"].items() if s}


def test_start_up_a_save_and_a_withheld_step(tmp_path, clock, capsys):
    run = tmp_path / "run"
    monitor = _monitor(run, clock)
    monitor.start()
    clock.advance(3.0)                  # compilation: the first step takes 3.5 s
    _train(monitor, clock, 20, pause=(11, 4.0), skipped={15})      # a 4 s save after step 10
    monitor.close()
    goodput, line = _summary(run, capsys)
    # 3 + 20 x 0.5 + 4 = 17 s; 19 steps trained
    assert goodput == {"share": pytest.approx(9.5 / 17), "wall_s": 17.0, "productive_s": 9.5,
                       "lost_s": {"restart": 0.0, "startup": 3.0, "pause": 4.0,
                                  "withheld": 0.5, "replay": 0.0, "rewind": 0.0, "hang": 0.0,
                                  "straggler": 0.0, "shutdown": 0.0}}
    assert line == ("  goodput 55.9% of 17.00 s: lost 4.00 s to pauses (checkpoint saves, "
                    "evaluations), 3.00 s to start-up and compilation, 500.0 ms to withheld "
                    "steps")


def test_a_restart_between_two_segments(tmp_path, clock, capsys):
    run = tmp_path / "run"
    monitor = _monitor(run, clock)
    _train(monitor, clock, 10)
    monitor.close()
    clock.advance(30.0)                 # the job is restarted 30 s later
    monitor = _monitor(run, clock)
    monitor.start()
    clock.advance(2.0)                  # loading the checkpoint, compiling again
    _train(monitor, clock, 10, first=11)
    monitor.close()
    goodput, line = _summary(run, capsys)
    assert (goodput["wall_s"], goodput["productive_s"]) == (42.0, 10.0)
    assert _lost(goodput) == {"restart": 30.0, "startup": 2.0}
    assert line == "  goodput 23.8% of 42.00 s: lost 30.00 s to restarts, " \
                   "2.00 s to start-up and compilation"


def test_a_crashed_segment_restarted(tmp_path, clock, capsys):
    """A segment killed after step 6 (no `end` record): from its last record to the next
    segment's start is the restart."""
    run = tmp_path / "run"
    monitor = _monitor(run, clock)
    monitor.start()                     # its `run` record now (a framework's train begin)
    _train(monitor, clock, 6)
    log = run / "rank_0.jsonl"
    kept = log.read_text()              # as the kill left it: no epoch, no end record
    monitor.close()
    log.write_text(kept)
    clock.advance(12.0)
    monitor = _monitor(run, clock)
    _train(monitor, clock, 4, first=5)  # resumed from step 4's checkpoint
    monitor.close()
    goodput, _ = _summary(run, capsys)
    assert _lost(goodput) == {"restart": 12.0}
    assert (goodput["wall_s"], goodput["productive_s"]) == (17.0, 5.0)


def test_rewound_steps_are_lost(tmp_path, clock, capsys):
    run = tmp_path / "run"
    monitor = _monitor(run, clock, on_anomaly="rewind", snapshot_every=5, snapshots_kept=2,
                       spike_window=8, spike_warmup=4, grad_explode=1e30,
                       framework=FrameworkHooks(snapshots=DictStore()))
    monitor.rewinds.begin(0)
    _train(monitor, clock, 30, loss=lambda step: 50.0 if step == 22 else 1.0, settle=True)
    monitor.close()
    goodput, line = _summary(run, capsys)
    # steps 21 and 22 were trained, then undone (back to step 20's snapshot)
    assert _lost(goodput) == {"rewind": 1.0}
    assert (goodput["wall_s"], goodput["productive_s"]) == (15.0, 14.0)
    assert line == "  goodput 93.3% of 15.00 s: lost 1.00 s to rewound steps"


def test_a_slow_rank_is_a_straggler(tmp_path, make_clock, capsys):
    run = tmp_path / "run"
    for rank, data_time in ((0, 0.1), (1, 0.3)):
        clock = make_clock()
        monitor = _monitor(run, clock, rank=rank, world_size=2)
        _train(monitor, clock, 10, data_time=data_time)
        monitor.close()
    goodput, line = _summary(run, capsys)
    # rank 1 spent 0.2 s more per step fetching data: rank 0 waited 10 x 0.2 s for it
    assert _lost(goodput) == {"straggler": pytest.approx(2.0)}
    assert goodput["wall_s"] == 5.0 and goodput["productive_s"] == pytest.approx(3.0)
    assert line == "  goodput 60.0% of 5.00 s: lost 2.00 s to stragglers"


def test_the_report_pages_show_it(tmp_path, clock):
    run = tmp_path / "run"
    monitor = _monitor(run, clock)
    _train(monitor, clock, 10, pause=(6, 5.0))
    monitor.close()
    out = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(out)]) in (0, 1)
    page = out.read_text()
    assert '<h2 id="goodput">Goodput</h2>' in page
    assert "<p>50.0% of the 10.00 s of wall-clock time trained the model" in page
    assert ("<tr><td>lost: pauses (checkpoint saves, evaluations)</td><td>5.00 s</td>"
            "<td>50.0%</td></tr>") in page
    other = tmp_path / "other"
    monitor = _monitor(other, clock)
    _train(monitor, clock, 10)
    monitor.close()
    both = tmp_path / "both.html"
    assert main(["report", str(run), str(other), "-o", str(both)]) in (0, 1)
    runs = both.read_text().split("<h2>Runs</h2>")[1].split("</table>")[0]
    assert "<th>goodput</th>" in runs and "50.0%" in runs and "100.0%" in runs


def test_a_hang_until_it_was_noticed_and_training_went_on(tmp_path, clock, capsys):
    """The watchdog thread finds the stall on the fake clock (25 s without a step, timeout
    10 s); the loop then goes on: the 25 s after step 5 are lost to the hang."""
    run = tmp_path / "run"
    monitor = _monitor(run, clock, hang_timeout_s=10.0)
    _train(monitor, clock, 5)
    clock.advance(25.0)
    log, deadline = run / "rank_0.jsonl", time.monotonic() + 10
    while '"anomaly":"hang"' not in log.read_text():
        assert time.monotonic() < deadline, "the watchdog did not report the stall"
        time.sleep(0.02)
    _train(monitor, clock, 5, first=6)
    monitor.close()
    goodput, line = _summary(run, capsys)
    assert _lost(goodput) == {"hang": 25.0}
    assert (goodput["wall_s"], goodput["productive_s"]) == (30.0, 5.0)
    assert line.startswith("  goodput 16.7% of 30.00 s: lost 25.00 s to hangs")
