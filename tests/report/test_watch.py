"""``mindwatch watch``: the file follower, the state, the view, and the live loop headless."""
import io
import json
import math
import os
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from mindwatch import Monitor
from mindwatch.cli import main
from mindwatch.observation import DeviceSample, HardwareSample
from mindwatch.report.watch import Follower, WatchState, render, sparkline, watch
from mindwatch.runlog import RunLogError

RUN = {"kind": "run", "rank": 0, "time": 1.0, "schema": 1, "world_size": 1, "host": "h",
       "pid": 1, "config": {}, "versions": {}}


def _line(record):
    return json.dumps(record) + "\n"


def _step(step, rank=0, loss=1.0):
    return {"kind": "step", "rank": rank, "time": 2.0 + step, "step": step, "epoch": 1,
            "loss": loss, "loss_smooth": loss, "lr": 1e-3, "grad_norm": 1.0,
            "step_time_s": 0.1, "skipped": False}


def _text(renderable, width=120):
    console = Console(file=io.StringIO(), width=width, force_terminal=False)
    console.print(renderable)
    return console.file.getvalue()


# -- Follower ---------------------------------------------------------------------------------
def test_torn_line_is_held_back_until_completed(tmp_path):
    path = tmp_path / "rank_0.jsonl"
    full = _line(RUN) + _line(_step(1))
    head, tail = full[:len(_line(RUN)) + 25], full[len(_line(RUN)) + 25:]
    path.write_text(head)
    follower = Follower(str(tmp_path))
    assert [r["kind"] for r in follower.poll()] == ["run"]      # the half step waits
    assert follower.poll() == []
    with open(path, "a") as handle:
        handle.write(tail)
    assert [r["step"] for r in follower.poll()] == [1]
    assert follower.poll() == []


def test_directory_and_files_appearing_later(tmp_path):
    run_dir = tmp_path / "later"
    follower = Follower(str(run_dir))
    assert not follower.exists and follower.poll() == []
    run_dir.mkdir()
    assert follower.exists and follower.poll() == []
    (run_dir / "rank_0.jsonl").write_text(_line(RUN) + _line(_step(1)))
    assert [r["kind"] for r in follower.poll()] == ["run", "step"]
    (run_dir / "rank_1.jsonl").write_text(_line(dict(RUN, rank=1)) + _line(_step(1, rank=1)))
    with open(run_dir / "rank_0.jsonl", "a") as handle:
        handle.write(_line(_step(2)))
    got = follower.poll()
    assert sorted((r["rank"], r["kind"], r.get("step")) for r in got) == [
        (0, "step", 2), (1, "run", None), (1, "step", 1)]


def test_other_files_are_ignored(tmp_path):
    (tmp_path / "rank_0.jsonl.tmp").write_text("garbage\n")
    (tmp_path / "notes.txt").write_text("hello\n")
    assert Follower(str(tmp_path)).poll() == []


def test_recreated_log_is_read_from_the_start(tmp_path):
    path = tmp_path / "rank_0.jsonl"
    path.write_text(_line(RUN) + _line(_step(1)) + _line(_step(2)))
    follower = Follower(str(tmp_path))
    assert len(follower.poll()) == 3
    path.unlink()
    path.write_text(_line(RUN))                      # a new run, shorter than the offset
    assert [r["kind"] for r in follower.poll()] == ["run"]


def test_a_bad_line_is_skipped_and_counted_a_foreign_file_raises(tmp_path):
    (tmp_path / "rank_0.jsonl").write_text(_line(RUN) + "not json\n" + _line(_step(1)))
    follower = Follower(str(tmp_path))
    assert [r["kind"] for r in follower.poll()] == ["run", "step"]
    assert follower.skipped == {0: (1, [2])}
    (tmp_path / "rank_0.jsonl").unlink()
    (tmp_path / "rank_0.jsonl").write_text(_line(_step(1)))
    with pytest.raises(RunLogError, match="not a mindwatch log"):
        Follower(str(tmp_path)).poll()
    (tmp_path / "rank_0.jsonl").write_text(_line(RUN) + "x\n" * 2)
    with pytest.raises(RunLogError, match="2 of 3 lines are not run-log records"):
        Follower(str(tmp_path)).poll()


def test_nonfinite_strings_are_decoded(tmp_path):
    (tmp_path / "rank_0.jsonl").write_text(_line(RUN) + _line(_step(1, loss="NaN")))
    assert math.isnan(Follower(str(tmp_path)).poll()[1]["loss"])


# -- state and view ---------------------------------------------------------------------------
def test_all_ended_waits_for_every_announced_rank():
    state = WatchState("d")
    state.exists = True
    state.update([dict(RUN, world_size=2), {"kind": "end", "rank": 0, "time": 3.0,
                                            "reason": "completed", "steps": 1, "elapsed_s": 1.0}])
    assert not state.all_ended                       # rank 1 has not even appeared
    state.update([dict(RUN, rank=1, world_size=2)])
    assert not state.all_ended
    state.update([{"kind": "end", "rank": 1, "time": 3.0, "reason": "stopped", "steps": 1,
                   "elapsed_s": 1.0}])
    assert state.all_ended
    state.update([dict(RUN, world_size=2)])          # rank 0 starts a new segment
    assert not state.all_ended


def test_render_waiting_messages(tmp_path):
    state = WatchState(str(tmp_path / "nope"))
    assert "waiting for" in _text(render(state)) and "to appear" in _text(render(state))
    state.exists = True
    assert "waiting for rank_*.jsonl" in _text(render(state))


def test_render_shows_steps_hardware_and_last_five_anomalies():
    state = WatchState("runs/x")
    state.exists = True
    records = [dict(RUN, total_steps=100)] + [_step(s, loss=1.0 / s) for s in range(1, 21)]
    records.append({"kind": "hardware", "rank": 0, "time": 3.0, "cpu_percent": 42.0,
                    "mem_used_gb": 12.5, "rss_gb": 2.25, "devices": [
                        {"type": "npu", "index": 0, "util_percent": 93.0, "mem_used_mb": 30720.0,
                         "mem_total_mb": 65536.0, "temp_c": 61.0, "power_w": None}]})
    records += [{"kind": "anomaly", "rank": 0, "time": 4.0 + i, "anomaly": f"kind_{i}",
                 "step": i, "value": float(i), "threshold": 1.0, "message": f"message {i}",
                 "actions": ["warn"], "checkpoint": None, "report": None} for i in range(7)]
    state.update(records)
    text = _text(render(state, elapsed_s=3.5))
    assert "20/100" in text and "0.05 " in text and "1.00e-03" in text and "100.0 ms" in text
    assert "42%" in text and "12.5 GB" in text and "npu0 93% 61°C 30.0 GB" in text
    assert "kind_6" in text and "kind_2" in text and "kind_1" not in text   # the last 5
    assert "7 in all" in text and "running" in text and "3.50 s" in text


def _row(text, rank):
    return next(line for line in text.splitlines() if line.strip().startswith(f"{rank} "))


def test_a_rank_stuck_since_its_hang_report_shows_hung_until_a_step_ends():
    state = WatchState("runs/x")
    state.exists = True
    hang = {"kind": "anomaly", "rank": 1, "time": 9.0, "anomaly": "hang", "step": 3,
            "value": 650.0, "threshold": 600.0, "message": "no step end", "actions": ["warn"],
            "checkpoint": None, "report": None, "where": "wait (threading.py:320)"}
    state.update([RUN, dict(RUN, rank=1), _step(3), _step(4), _step(3, rank=1), hang])
    text = _text(render(state))
    assert "hung >10m50s" in _row(text, 1) and "running" in _row(text, 0)
    state.update([_step(4, rank=1)])           # the rank came back
    assert "running" in _row(_text(render(state)), 1)


def test_throughput_is_tokens_and_mfu_when_the_run_logs_them():
    state = WatchState("runs/x")
    state.exists = True
    state.update([RUN, dict(_step(1), samples_per_s=80.0, tokens_per_s=40960.0, mfu=0.4123),
                  dict(RUN, rank=1), dict(_step(1, rank=1), samples_per_s=80.0)])
    text = _text(render(state))
    assert "41.0k tok/s MFU 41.2%" in _row(text, 0)
    assert "80.0 samples/s" in _row(text, 1) and "tok/s" not in _row(text, 1)


def test_a_running_rank_shows_its_eta_and_an_ended_one_its_end():
    state = WatchState("runs/x")
    state.exists = True
    state.update([dict(RUN, total_steps=100), dict(_step(20), eta_s=125.0),
                  dict(RUN, rank=1), dict(_step(100, rank=1), eta_s=0.0),
                  {"kind": "end", "rank": 1, "time": 9.0, "reason": "completed", "steps": 100,
                   "elapsed_s": 50.0}])
    text = _text(render(state))
    assert "running, ETA 2m05s" in _row(text, 0)
    assert "completed" in _row(text, 1) and "ETA" not in _row(text, 1)


def test_sparkline():
    assert sparkline([1.0, 2.0, 3.0, 4.0]) == "▁▃▆█"
    assert sparkline([1.0, float("nan"), None, 1.0]) == "▁! ▁"
    assert sparkline([]) == ""


# -- the live loop -----------------------------------------------------------------------------
def _train(run_dir, ranks=2, steps=40, delay=0.004, marks=None):
    """A real Monitor per rank writing while `watch` follows; rank 1 hits a NaN at step 30."""
    monitors = [Monitor(run_dir, rank=r, world_size=ranks, stream=io.StringIO(), batch_size=4,
                        hardware_interval_s=None, on_anomaly="warn") for r in range(ranks)]
    for step in range(1, steps + 1):
        for rank, monitor in enumerate(monitors):
            loss = float("nan") if (rank, step) == (1, 30) else 2.0 / step
            monitor.observe(step=step, epoch=1, loss=loss, lr=1e-3, grad_norm=1.0)
            if step % 10 == 0:
                monitor.observe_hardware(HardwareSample(
                    time=time.time(), cpu_percent=55.0, mem_used_gb=3.0, rss_gb=0.5,
                    devices=[DeviceSample(type="gpu", index=rank, util_percent=77.0,
                                          temp_c=66.0, mem_used_mb=500.0)]))
        time.sleep(delay)
    if marks is not None:
        marks["closing"] = time.monotonic()
    for monitor in monitors:
        monitor.close()


def test_watch_follows_a_live_run_and_returns_at_the_end(tmp_path):
    run_dir = str(tmp_path / "run")                  # does not exist yet when watch starts
    marks = {}

    def writer():
        time.sleep(0.1)
        _train(run_dir, marks=marks)

    thread = threading.Thread(target=writer)
    # wide enough that the header's run directory (tmp_path: longer under xdist) never
    # wraps "2/2 ranks, 2 ended" onto two lines
    console = Console(file=io.StringIO(), width=400, force_terminal=False)
    thread.start()
    try:
        code = watch(run_dir, console=console, refresh_s=0.02, timeout_s=30)
        returned = time.monotonic()
    finally:
        thread.join()
    assert code == 0
    assert marks["closing"] <= returned < marks["closing"] + 5   # not before, soon after `end`
    out = console.file.getvalue()
    assert "(final)" in out and "2/2 ranks, 2 ended" in out
    assert out.count("40") >= 2 and "completed" in out
    assert "loss_nonfinite" in out and "loss is nan at step 30" in out
    assert "gpu1 77% 66°C 500 MB" in out


def test_watch_timeout_and_interrupt(tmp_path):
    (tmp_path / "rank_0.jsonl").write_text(_line(RUN) + _line(_step(5)))   # never ends
    ticks = iter(range(1000))
    console = Console(file=io.StringIO(), width=120, force_terminal=False)
    code = watch(str(tmp_path), console=console, refresh_s=1.0, clock=lambda: next(ticks),
                 timeout_s=3, sleep=lambda s: None)
    assert code == 1 and "running" in console.file.getvalue()

    def interrupt(_):
        raise KeyboardInterrupt
    console = Console(file=io.StringIO(), width=120, force_terminal=False)
    assert watch(str(tmp_path), console=console, sleep=interrupt) == 130
    assert "(final)" in console.file.getvalue()


def test_cli_watch(tmp_path, capsys):
    _train(str(tmp_path), ranks=1, steps=5, delay=0)
    assert main(["watch", str(tmp_path), "--refresh", "0.01"]) == 0
    assert "1/1 rank, 1 ended" in " ".join(capsys.readouterr().out.split())
    with open(tmp_path / "rank_0.jsonl", "a") as handle:
        handle.write("}{\n")                      # a bad line after the end: skipped, said
    assert main(["watch", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "rank 0: 1 unreadable line skipped (line 9)" in out
    (tmp_path / "rank_0.jsonl").write_bytes(b"\x00\xff garbage\n" * 3)
    assert main(["watch", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mindwatch watch: ") and err.count("\n") == 1
    assert main(["watch", str(tmp_path), "--refresh", "0"]) == 2
    assert os.path.exists(tmp_path / "rank_0.jsonl")


# -- into a file ------------------------------------------------------------------------------
LONG_MESSAGE = ("device temperature 97°C > 90°C on npu3 for 5 samples in a row (the last "
                "readings 95°C, 96°C, 96°C, 97°C, 97°C); a checkpoint was written before the "
                "stop, see runs/wide/checkpoints/overheat_step3_rank7.ckpt for the weights")
DEVICES = "; ".join(f"npu{i} 93% 61°C 30.0 GB" for i in range(8))


def _wide_run(run_dir, ranks=8):
    """A finished run whose rows are wider than 80 columns: 8 ranks of 8 NPUs each, tokens/s
    with MFU, and an anomaly with a long message."""
    run_dir.mkdir()
    for rank in range(ranks):
        records = [dict(RUN, rank=rank, world_size=ranks, total_steps=1000)]
        records += [dict(_step(s, rank=rank, loss=4.0 / s), samples_per_s=80.0,
                         tokens_per_s=40960.0, mfu=0.4123) for s in (1, 2, 3)]
        records.append({"kind": "hardware", "rank": rank, "time": 6.0, "cpu_percent": 42.0,
                        "mem_used_gb": 12.5, "rss_gb": 2.25, "devices": [
                            {"type": "npu", "index": i, "util_percent": 93.0,
                             "mem_used_mb": 30720.0, "mem_total_mb": 65536.0, "temp_c": 61.0,
                             "power_w": None} for i in range(8)]})
        if rank == 7:
            records.append({"kind": "anomaly", "rank": 7, "time": 7.0, "anomaly": "overheat",
                            "step": 3, "value": 97.0, "threshold": 90.0,
                            "message": LONG_MESSAGE, "actions": ["checkpoint", "stop"],
                            "checkpoint": None, "report": None})
        records.append({"kind": "end", "rank": rank, "time": 8.0, "reason": "completed",
                        "steps": 3, "elapsed_s": 6.0})
        (run_dir / f"rank_{rank}.jsonl").write_text("".join(map(_line, records)))


def _watch_into_a_file(tmp_path, run_dir, **env):
    """The real `mindwatch watch` with its stdout a file (no terminal); returns its lines.
    Without the variables that set rich's width or make it act as on a terminal."""
    out = tmp_path / "watch.txt"
    environment = {k: v for k, v in os.environ.items() if k not in (
        "COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")} | env
    with open(out, "w") as handle:
        done = subprocess.run([sys.executable, "-m", "mindwatch.cli", "watch", str(run_dir)],
                              stdout=handle, stderr=subprocess.PIPE, text=True, env=environment,
                              stdin=subprocess.DEVNULL, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    return out.read_text(encoding="utf-8").splitlines()


def test_watch_into_a_file_cuts_no_row(tmp_path):
    run_dir = tmp_path / "wide"
    _wide_run(run_dir)
    lines = _watch_into_a_file(tmp_path, run_dir)
    assert lines[0].startswith(f"mindwatch watch (final): {run_dir}: 8/8 ranks, 8 ended, "
                               "watching for ")
    for rank in range(8):                                    # every column of every rank
        assert _row("\n".join(lines), rank).split() == [
            str(rank), "3/1000", "1.333", "1.333", "█▃▁", "1.00e-03", "1", "100.0", "ms",
            "41.0k", "tok/s", "MFU", "41.2%", "completed"]
    devices = [line for line in lines if DEVICES in line]
    assert [line.split()[:6] for line in devices] == [
        [str(rank), "42%", "12.5", "GB", "2.2", "GB"] for rank in range(8)]
    message = [line for line in lines if LONG_MESSAGE in line]
    # one row per event: the rank, then its line (kinds, step, message, actions)
    assert len(message) == 1 and message[0].split()[:5] == [
        "7", "overheat", "at", "step", "3:"]
    assert message[0].rstrip().endswith(f"{LONG_MESSAGE} [checkpoint+stop]")
    assert max(map(len, lines)) == len(message[0])           # as wide as its widest row


def test_watch_into_a_file_keeps_the_width_columns_asks_for(tmp_path):
    run_dir = tmp_path / "wide"
    _wide_run(run_dir)
    lines = _watch_into_a_file(tmp_path, run_dir, COLUMNS="100")
    assert max(map(len, lines)) == 100
    assert _row("\n".join(lines), 0).startswith("   0  3/10…  1.3… ")     # cut, as asked
    assert not [line for line in lines if LONG_MESSAGE in line]          # wrapped


def _state(step, rank, **ratios):
    return {"kind": "state", "rank": rank, "time": 3.0 + step, "step": step,
            "weight_norm": 12.5, "update_norm": 0.0625, "layers": {
                layer: {"weight_norm": 1.0, "update_norm": ratio, "update_ratio": ratio,
                        "grad_norm": 0.5} for layer, ratio in ratios.items()}}


def test_inside_the_model_shows_each_ranks_layer_with_the_largest_update_ratio():
    state = WatchState("runs/x")
    state.exists = True
    state.update([dict(RUN), dict(RUN, rank=1), _step(100), _step(100, rank=1),
                  _state(100, 0, **{"blocks.0.attn": 1e-3, "blocks.1.mlp": 4e-3}),
                  _state(100, 1, **{"blocks.0.attn": 2e-3, "blocks.1.mlp": math.nan}),
                  _state(200, 0, **{"blocks.0.attn": 0.25, "blocks.1.mlp": 4e-3})])
    text = _text(render(state))
    assert "inside the model (latest state record)" in text
    rows = [line for line in text.splitlines() if "blocks." in line]
    assert rows[0].split()[:3] == ["0", "200", "12.5"] and "blocks.0.attn 0.25" in rows[0]
    assert rows[1].split()[:2] == ["1", "100"] and "blocks.1.mlp nan" in rows[1]   # NaN first
    assert "inside the model" not in _text(render(_only_steps()))
    assert "attention logit" not in text


def test_inside_the_model_names_the_largest_attention_logit_when_watched():
    state = WatchState("runs/x")
    state.exists = True
    record = _state(100, 0, **{"blocks.0.attn": 1e-3})
    record["activations"] = {"blocks.0.attn.scores": {"max_logit": 12.0},
                             "blocks.1.attn.scores": {"max_logit": 140.0},
                             "blocks.1.mlp": {"max_abs": 900.0, "rms": 3.0}}
    state.update([dict(RUN), _step(100), record])
    rows = [line for line in _text(render(state)).splitlines() if "blocks." in line]
    assert rows[0].split()[-2:] == ["blocks.1.attn.scores", "140"]


def _only_steps():
    state = WatchState("runs/x")
    state.exists = True
    state.update([dict(RUN), _step(1)])
    return state
