"""runlog.LineDecoder: the one place that turns run-log bytes into records."""
import pytest

from mindwatch.runlog import LineDecoder, RunLogError, read_rank_log

RUN = b'{"kind":"run","rank":0,"time":1.0}'
STEP = b'{"kind":"step","rank":0,"time":2.0,"loss":"NaN"}'


def test_lines_complete_only_with_their_newline():
    decoder = LineDecoder("rank_0.jsonl")
    assert decoder.feed(RUN + b"\n" + STEP[:10]) == [{"kind": "run", "rank": 0, "time": 1.0}]
    [step] = decoder.feed(STEP[10:] + b"\n\n")
    assert step["loss"] != step["loss"]                 # "NaN" revived to a float NaN
    assert decoder.tail() == (None, False) and decoder.line == 3


def test_a_torn_tail_is_reported_not_raised(tmp_path):
    path = tmp_path / "rank_0.jsonl"
    path.write_bytes(RUN + b"\n" + STEP[:-3])
    log = read_rank_log(str(path))
    assert len(log.records) == 1 and log.torn_tail
    path.write_bytes(RUN + b"\n" + STEP)                # no newline yet, but whole
    log = read_rank_log(str(path))
    assert len(log.records) == 2 and not log.torn_tail


def test_bad_lines_and_foreign_files_are_errors():
    with pytest.raises(RunLogError, match=r"x.jsonl, line 2: not a run-log record"):
        LineDecoder("x.jsonl").feed(RUN + b"\n{nope\n")
    with pytest.raises(RunLogError, match="first record is not a 'run' record"):
        LineDecoder("x.jsonl").feed(b"\n" + STEP + b"\n")
    decoder = LineDecoder("x.jsonl")
    decoder.feed(STEP[:5])
    decoder.feed(STEP[5:])
    with pytest.raises(RunLogError, match="first record"):
        decoder.tail()
