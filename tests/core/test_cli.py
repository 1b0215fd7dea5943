"""`mindwatch summary`: verdict, JSON, and exit codes 0 / 1 / 2."""
import io
import json

import pytest

from mindwatch import Monitor
from mindwatch.cli import main


def _run(tmp_path, clock, losses):
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), on_anomaly="warn")
    for step, loss in enumerate(losses, start=1):
        clock.advance(0.1)
        monitor.observe(step=step, epoch=1, loss=loss, grad_norm=1.0)
    monitor.close()


def test_healthy_run_exits_0(tmp_path, clock, capsys):
    _run(tmp_path, clock, [3.0, 2.0, 1.0])
    assert main(["summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "HEALTHY" in out and "rank 0: 3 steps, completed" in out


def test_anomalies_exit_1_and_json_lists_them(tmp_path, clock, capsys):
    _run(tmp_path, clock, [3.0, float("nan"), 1.0])
    assert main(["summary", str(tmp_path), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["healthy"] is False and result["anomalies"] == 1
    assert result["ranks"][0]["anomalies"][0]["anomaly"] == "loss_nonfinite"
    assert result["ranks"][0]["anomalies"][0]["step"] == 2


def test_torn_last_line_is_tolerated(tmp_path, clock, capsys):
    _run(tmp_path, clock, [3.0, 2.0])
    with open(tmp_path / "rank_0.jsonl", "a") as handle:
        handle.write('{"kind":"step","rank":0,"ti')
    assert main(["summary", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["torn_last_line"] is True


@pytest.mark.parametrize("content", ['{"kind":"run"}\nnot json\n{"kind":"end"}\n',
                                     '{"kind":"step","loss":NaN}\n'])
def test_unreadable_input_exits_2_with_one_line(tmp_path, capsys, content):
    (tmp_path / "rank_0.jsonl").write_text(content)
    assert main(["summary", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and "rank_0.jsonl" in captured.err


def test_missing_directory_and_empty_directory_exit_2(tmp_path, capsys):
    assert main(["summary", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert main(["summary", str(tmp_path)]) == 2
    assert "no rank_<R>.jsonl" in capsys.readouterr().err


def test_summary_reads_every_rank_and_gives_the_spread(tmp_path, capsys, make_clock):
    for rank, losses in ((0, [3.0, 2.0]), (1, [3.5, float("nan")]), (2, [3.2, 2.4])):
        clock = make_clock()
        monitor = Monitor(str(tmp_path), rank=rank, world_size=3, clock=clock,
                          stream=io.StringIO(), hardware_interval_s=None, on_anomaly="warn")
        for step, loss in enumerate(losses, start=1):
            clock.advance(0.1 * (rank + 1))
            monitor.observe(step=step, loss=loss)
        monitor.close()
    assert main(["summary", str(tmp_path), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in result["ranks"]] == [0, 1, 2]
    assert [(a["anomaly"], a["step"]) for a in result["ranks"][1]["anomalies"]] == [
        ("loss_nonfinite", 2)]
    spread = result["spread"]
    assert spread["step"] == 2
    # rank 1's NaN is not a point of the spread, and is named beside it
    assert spread["loss"] == {"min": 2.0, "median": 2.2, "max": 2.4, "nonfinite": {"1": "NaN"}}
    assert spread["step_time_s"]["min"] == pytest.approx(0.1)
    assert spread["step_time_s"]["max"] == pytest.approx(0.3)
    # The text answers for the job (issue #43): no line per rank; the NaN is the job's one
    # event, named with its rank and host.
    assert main(["summary", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == ("  3 ranks on 1 host (rank logs): steps 1-2, completed; loss 3.233 -> "
                        "nan (mean over ranks; last finite 3.233)")
    assert lines[2].startswith("  loss_nonfinite at step 2 on rank 1 (host ")
    assert lines[2].endswith(") [warn]")
    assert "rank 2 the slowest (largest step time at 2 of 2 steps, 300.0 ms against a median " \
        "200.0 ms)" in lines[4]
