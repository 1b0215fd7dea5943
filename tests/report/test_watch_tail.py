"""The live view of a large log: the first frame from the tail of each log, the older records
after it; once all is read, the view is the one a full read from the start gives."""
import io
import json

import pytest
from rich.console import Console

from mindwatch.report.watch import WatchState, render, watch
from mindwatch.runlog import RunLogError, follower, history
from mindwatch.runlog.follower import Follower

RUN = {"kind": "run", "rank": 0, "time": 1.0, "schema": 1, "world_size": 2, "host": "h",
       "pid": 1, "config": {}, "versions": {}, "total_steps": 400}


def _step(step, rank=0):
    return {"kind": "step", "rank": rank, "time": 2.0 + step, "step": step, "epoch": 1,
            "loss": 1.0 / step, "loss_smooth": 1.0, "lr": 1e-3, "grad_norm": 1.0,
            "step_time_s": 0.1, "skipped": False}


def _anomaly(step, rank=0):
    return {"kind": "anomaly", "rank": rank, "time": 2.0 + step, "anomaly": f"kind_{step}",
            "step": step, "value": 1.0, "threshold": 0.5, "message": f"at {step}",
            "actions": ["warn"], "checkpoint": None, "report": None}


def _log(tmp_path, rank, extra=None, steps=400, end=True):
    lines = [json.dumps(dict(RUN, rank=rank))]
    for step in range(1, steps + 1):
        lines.append(json.dumps(_step(step, rank)))
        if step % 50 == 0:
            lines.append(json.dumps(_anomaly(step, rank)))
        if extra and step in extra:
            lines.append(extra[step])
        if step == 100:
            lines.append(json.dumps({"kind": "hardware", "rank": rank, "time": 9.0,
                                     "cpu_percent": 40.0, "mem_used_gb": 2.0, "rss_gb": 1.0,
                                     "devices": [{"type": "npu", "index": rank,
                                                  "util_percent": 80.0, "mem_used_mb": 5.0,
                                                  "mem_total_mb": 9.0, "temp_c": 50.0,
                                                  "power_w": None}]}))
    if end:
        lines.append(json.dumps({"kind": "end", "rank": rank, "time": 99.0,
                                 "reason": "completed", "steps": steps, "elapsed_s": 9.0}))
    (tmp_path / f"rank_{rank}.jsonl").write_text("\n".join(lines) + "\n")


def _text(state):
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    console.print(render(state))
    return console.file.getvalue()


def _view(tmp_path, tail_bytes, monkeypatch):
    """The state after the first poll, and after the histories, with tails this long."""
    monkeypatch.setattr(follower, "TAIL_BYTES", tail_bytes)
    monkeypatch.setattr(history, "HEAD_BYTES", 500)
    follow, state = Follower(str(tmp_path)), WatchState(str(tmp_path))
    state.exists = True
    state.update(follow.poll())
    state.update_history(follow.read_history(0))
    state.skipped, state.history_left = follow.skipped, follow.history_left
    first = _text(state), dict(state.skipped), state.history_left
    while follow.history_left:
        state.update_history(follow.read_history(size=3000))
    state.skipped, state.history_left = follow.skipped, follow.history_left
    return first, (_text(state), state.skipped)


def test_the_tail_first_then_the_same_view_as_a_full_read(tmp_path, monkeypatch):
    bad = {120: "not json", 390: '{"kind":"step"}'}
    _log(tmp_path, 0, extra=bad)
    _log(tmp_path, 1)
    (first, _), (full, skipped) = _view(tmp_path, 4000, monkeypatch), \
        _view(tmp_path, 10**9, monkeypatch)[1]
    text, first_skipped, left = first
    assert left > 0.9 and "reading older records" in text
    assert "400/400" in text and "completed" in text          # from the tails alone
    assert first_skipped == {0: (1, [])}                      # the tail's line, not numbered
    assert "1 unreadable line skipped" in text
    later = _view(tmp_path, 4000, monkeypatch)[1]
    assert later == (full, skipped)                           # all read: the same view
    assert skipped == {0: (2, [125, 401])} and "(16 in all)" in full


def test_a_bad_tail_is_an_error_with_the_full_read_s_message(tmp_path, monkeypatch):
    _log(tmp_path, 0, end=False, steps=50)
    with open(tmp_path / "rank_0.jsonl", "a") as handle:
        handle.write("garbage\n" * 200)
    messages = []
    for tail_bytes in (500, 10**9):
        monkeypatch.setattr(follower, "TAIL_BYTES", tail_bytes)
        with pytest.raises(RunLogError) as error:
            Follower(str(tmp_path)).poll()
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "200 of 252 lines" in messages[0]


def test_a_large_foreign_file_fails_before_the_first_frame(tmp_path, monkeypatch):
    monkeypatch.setattr(follower, "TAIL_BYTES", 500)
    lines = [json.dumps(_step(n)) for n in range(1, 200)]
    (tmp_path / "rank_0.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunLogError, match="line 1: the first record is not a 'run' record"):
        Follower(str(tmp_path)).poll()


def test_a_recreated_log_starts_over(tmp_path, monkeypatch):
    monkeypatch.setattr(follower, "TAIL_BYTES", 2000)
    _log(tmp_path, 0)
    follow = Follower(str(tmp_path))
    follow.poll()
    assert follow.history_left
    (tmp_path / "rank_0.jsonl").unlink()
    (tmp_path / "rank_0.jsonl").write_text(json.dumps(RUN) + "\n")
    assert [r["kind"] for r in follow.poll()] == ["run"] and not follow.history_left


def test_watch_reads_the_history_between_frames_and_ends_with_the_full_view(tmp_path,
                                                                            monkeypatch):
    _log(tmp_path, 0, extra={7: "torn {"})
    _log(tmp_path, 1)
    outputs = []
    for tail_bytes in (3000, 10**9):
        monkeypatch.setattr(follower, "TAIL_BYTES", tail_bytes)
        console = Console(file=io.StringIO(), width=200, force_terminal=False)
        assert watch(str(tmp_path), console=console, refresh_s=0.01) == 0
        final = console.file.getvalue().split("mindwatch watch (final)")[-1]
        outputs.append(final.split("\n", 1)[1])            # without the elapsed time
    assert outputs[0] == outputs[1]
    assert "rank 0: 1 unreadable line skipped (line 9)" in " ".join(outputs[0].split())


def test_bad_lines_early_in_the_history_are_judged_with_the_whole_file(tmp_path, monkeypatch):
    """More bad lines than records in the part read so far is no error when the whole file
    has more records: as a read from the start decides."""
    _log(tmp_path, 0, extra={1: "\n".join(["garbage"] * 40)})
    _, (text, skipped) = _view(tmp_path, 4000, monkeypatch)
    assert skipped == {0: (40, [3, 4, 5, 6, 7])}
    assert (text, skipped) == _view(tmp_path, 10**9, monkeypatch)[1]
