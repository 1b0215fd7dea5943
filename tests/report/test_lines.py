"""runlog.LineDecoder and read_rank_log: what is skipped and counted, what is an error."""
import json
import os
import tracemalloc

import pytest

from mindwatch.runlog import LineDecoder, RunLogError, read_rank_log
from mindwatch.runlog.lines import MAX_LINE_BYTES

RUN = json.dumps({"kind": "run", "rank": 0, "time": 1.0, "schema": 1, "world_size": 1,
                  "host": "h", "pid": 1, "config": {}, "versions": {}}).encode()
STEP = json.dumps({"kind": "step", "rank": 0, "time": 2.0, "step": 1, "epoch": 1,
                   "loss": "NaN", "loss_smooth": None, "lr": None, "grad_norm": None,
                   "step_time_s": None, "skipped": False}).encode()
END = json.dumps({"kind": "end", "rank": 0, "time": 3.0, "reason": "completed", "steps": 1,
                  "elapsed_s": 1.0}).encode()


def _log(tmp_path, data):
    path = tmp_path / "rank_0.jsonl"
    path.write_bytes(data)
    return str(path)


def test_lines_complete_only_with_their_newline():
    decoder = LineDecoder("rank_0.jsonl")
    assert [r["kind"] for r in decoder.feed(RUN + b"\n" + STEP[:10])] == ["run"]
    [step] = decoder.feed(STEP[10:] + b"\n\n")
    assert step["loss"] != step["loss"]                 # "NaN" revived to a float NaN
    assert decoder.tail() == (None, False) and decoder.line == 3 and decoder.skipped == 0


def test_a_torn_tail_is_skipped_and_counted(tmp_path):
    log = read_rank_log(_log(tmp_path, RUN + b"\n" + STEP[:-3]))
    assert len(log.records) == 1 and log.torn_tail and (log.skipped, log.skipped_at) == (1, [2])
    log = read_rank_log(_log(tmp_path, RUN + b"\n" + STEP))     # no newline yet, but whole
    assert len(log.records) == 2 and not log.torn_tail and log.skipped == 0


def test_torn_and_undecodable_lines_in_the_middle_are_skipped(tmp_path):
    data = b"\n".join([RUN, STEP[:17], STEP, b"\xff\xfe\x00garbage", b'{"kind":"step"}',
                       b"[1, 2]", STEP, END]) + b"\n"
    log = read_rank_log(_log(tmp_path, data))
    assert [r["kind"] for r in log.records] == ["run", "step", "step", "end"]
    assert (log.skipped, log.skipped_at, log.torn_tail) == (4, [2, 4, 5, 6], False)
    assert log.end["reason"] == "completed"


def test_unknown_kinds_are_kept_for_readers_to_ignore(tmp_path):
    future = b'{"kind":"checkpoint_saved","rank":0,"time":2.5,"path":"x"}'
    log = read_rank_log(_log(tmp_path, b"\n".join([RUN, future, STEP, END]) + b"\n"))
    assert [r["kind"] for r in log.records] == ["run", "checkpoint_saved", "step", "end"]
    assert log.skipped == 0


def test_the_end_of_the_latest_segment_is_found_past_a_late_record(tmp_path):
    late = b'{"kind":"notice","rank":0,"time":4.0,"message":"late"}'
    assert read_rank_log(_log(tmp_path, b"\n".join([RUN, END, late]))).end is not None
    assert read_rank_log(_log(tmp_path, b"\n".join([RUN, END, RUN, STEP]))).end is None


@pytest.mark.parametrize("data, message", [
    (b"", "no run-log record"),
    (b"\n\n  \n", "no run-log record"),
    (STEP + b"\n" + RUN + b"\n", "line 1: the first record is not a 'run' record"),
    (b'{"kind":"run","rank":0,"time":1}\n' + STEP + b"\n", "not a complete 'run' record"),
    (b'{"name":"a","value":1}\n{"name":"b","value":2}\n', "first record is not a 'run'"),
    (bytes(range(256)) * 40, "41 of 41 lines are not run-log records"),
    (b"\x00\x01\x02\n\xff\xfe\n", "2 of 2 lines are not run-log records"),
    (RUN[:30], "1 of 1 lines"),
    (RUN + b"\nnot json\n{}\n", "2 of 3 lines are not run-log records (first: line 2"),
])
def test_files_that_are_not_run_logs_are_errors(tmp_path, data, message):
    path = _log(tmp_path, data)
    with pytest.raises(RunLogError, match=f"^{path}.*{message}".replace("(", r"\(")):
        read_rank_log(path)


def test_a_directory_or_fifo_named_like_a_log_is_an_error(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "rank_0.jsonl").mkdir()
    os.mkfifo(tmp_path / "b" / "rank_0.jsonl")         # opening it would block for ever
    for where in ("a", "b"):
        with pytest.raises(RunLogError, match="not a regular file"):
            read_rank_log(str(tmp_path / where / "rank_0.jsonl"))


def _read_with_peak_memory(path):
    """The log read back, and the peak of Python allocations while reading it (bytes)."""
    tracemalloc.start()
    try:
        log = read_rank_log(str(path))
        return log, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_line_is_skipped_with_bounded_memory(tmp_path):
    path = tmp_path / "rank_0.jsonl"
    with open(path, "wb") as handle:
        handle.write(RUN + b"\n" + STEP + b"\n")
        handle.write(b'{"kind":"step","blob":"' + b"a" * (50 * 2**20) + b'"}\n')  # 50 MB line
        handle.write(STEP + b"\n" + END + b"\n")
    log, peak = _read_with_peak_memory(path)
    assert [r["kind"] for r in log.records] == ["run", "step", "step", "end"]
    assert (log.skipped, log.skipped_at) == (1, [3])
    assert peak < 3 * MAX_LINE_BYTES < 50 * 2**20, peak


def test_a_huge_last_line_without_newline_is_a_torn_tail(tmp_path):
    path = tmp_path / "rank_0.jsonl"
    with open(path, "wb") as handle:
        handle.write(RUN + b"\n" + STEP + b"\n")
        handle.truncate(200 * 2**20)                   # 200 MB of NUL bytes, no newline
    log, peak = _read_with_peak_memory(path)
    assert len(log.records) == 2 and log.torn_tail and log.skipped == 1
    assert peak < 3 * MAX_LINE_BYTES, peak


def test_a_line_just_within_the_cap_is_read():
    decoder = LineDecoder("x")
    decoder.feed(RUN + b"\n")
    padding = MAX_LINE_BYTES - len(STEP) - len(b',"pad":""')
    line = STEP[:-1] + b',"pad":"' + b"p" * padding + b'"}'
    assert len(line) == MAX_LINE_BYTES
    assert [r["kind"] for r in decoder.feed(line + b"\n")] == ["step"]
    assert decoder.feed(line + b"pp\n") == [] and decoder.skipped == 1


def test_a_long_line_fed_in_pieces_is_skipped_once():
    decoder = LineDecoder("x")
    decoder.feed(RUN + b"\n")
    for _ in range(5):
        assert decoder.feed(b"z" * (MAX_LINE_BYTES // 2)) == []
    assert len(decoder.pending) <= MAX_LINE_BYTES
    assert [r["kind"] for r in decoder.feed(b"zz\n" + STEP + b"\n")] == ["step"]
    assert (decoder.skipped, decoder.skipped_at, decoder.line) == (1, [2], 3)
