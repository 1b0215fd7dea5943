import io

from mindwatch import Monitor
from mindwatch.sinks.console import ConsoleSink


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _step(step, **fields):
    record = {"kind": "step", "rank": 0, "step": step, "epoch": 1, "loss": 2.5,
              "loss_smooth": 2.75, "lr": 1e-3, "grad_norm": 0.5, "step_time_s": 0.0452,
              "samples_per_s": 354.0, "skipped": False, "steps_covered": 1}
    record.update(fields)
    return record


def test_one_aligned_line_every_interval_and_no_bar_off_a_terminal():
    out = io.StringIO()
    sink = ConsoleSink(rank=3, print_interval=2, stream=out)
    sink.total_steps = 100
    for step in range(1, 5):
        sink.write(_step(step))
    lines = out.getvalue().splitlines()
    assert lines == [
        "[rank 3] epoch   1 step   2/100 | loss       2.5 (smooth      2.75) | lr 1.00e-03 | "
        "grad       0.5 |   45.2 ms/step | 354.0 samples/s",
        "[rank 3] epoch   1 step   4/100 | loss       2.5 (smooth      2.75) | lr 1.00e-03 | "
        "grad       0.5 |   45.2 ms/step | 354.0 samples/s",
    ]
    assert "\r" not in out.getvalue() and "ETA" not in out.getvalue()


def test_the_step_line_ends_with_the_eta_when_the_run_length_is_known():
    out = io.StringIO()
    sink = ConsoleSink(print_interval=10, stream=out)
    sink.total_steps = 100
    sink.write(_step(10, eta_s=3725.0))
    sink.write(_step(20))                          # no eta_s: nothing made up
    first, second = out.getvalue().splitlines()
    assert first.endswith("| 354.0 samples/s | ETA 1h02m")
    assert second.endswith("| 354.0 samples/s")


def test_sink_mode_record_crossing_an_interval_prints():
    out = io.StringIO()
    sink = ConsoleSink(print_interval=10, stream=out)
    sink.write(_step(8, steps_covered=4))     # covers 5..8: no multiple of 10
    sink.write(_step(12, steps_covered=4))    # covers 9..12: crosses 10
    assert [line.split("|")[0].strip() for line in out.getvalue().splitlines()] == [
        "[rank 0] epoch   1 step     12"]


def test_progress_bar_with_eta_on_a_terminal():
    out = _Terminal()
    sink = ConsoleSink(print_interval=100, stream=out)
    sink.total_steps = 10
    sink.write(_step(4, step_time_s=2.0, eta_s=12.0))      # the step record's own ETA
    assert out.getvalue().endswith("\r\x1b[2K[#########...............] 4/10 ETA 12.00 s")
    sink.write({"kind": "notice", "rank": 0, "message": "hello"})
    assert out.getvalue().endswith("\r\x1b[2K[rank 0] note: hello\n")


def test_quiet_rank_prints_only_anomalies(tmp_path, clock):
    out = io.StringIO()
    monitor = Monitor(str(tmp_path), rank=1, world_size=2, clock=clock, stream=out,
                      print_interval=1)
    monitor.observe(step=1, loss=1.0)
    monitor.observe(step=2, loss=float("nan"))
    monitor.close()
    assert out.getvalue().splitlines() == [
        "[rank 1] ANOMALY loss_nonfinite at step 2: loss is nan at step 2 [checkpoint+stop]"]


def test_epoch_verdict_lines(tmp_path, clock):
    out = io.StringIO()
    monitor = Monitor(str(tmp_path), clock=clock, stream=out, print_interval=100)
    for step, (epoch, loss) in enumerate([(1, 3.0), (1, 2.0), (2, 1.0), (3, 4.0)], start=1):
        monitor.observe(step=step, epoch=epoch, loss=loss)
    monitor.close()
    text = out.getvalue()
    assert "epoch 1 done: mean loss 2.5 over 2 steps (first epoch)" in text
    assert "epoch 2 done: mean loss 1 over 1 steps (-1.5 vs previous epoch: converging)" in text
    assert "epoch 3 done: mean loss 4 over 1 steps (+3 vs previous epoch: NOT converging)" in text
