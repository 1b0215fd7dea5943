"""A run killed with SIGKILL mid-training leaves a log whose every complete line parses, and
the readers go on past what repeated kills leave (benchmarks/crash_loop.py, a few rounds)."""
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time

from mindwatch import records
from mindwatch.runlog import read_rank_log

TRAINER = textwrap.dedent("""
    import sys, time
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import Callback
    sys.path.insert(0, sys.argv[2])
    from ms_helpers import make_regressor, regression_dataset
    from mindwatch.mindspore import TrainMonitor

    class Slow(Callback):
        def on_train_step_end(self, run_context):
            time.sleep(0.01)

    ms.set_context(mode=ms.GRAPH_MODE)
    net = make_regressor()
    monitor = TrainMonitor(sys.argv[1], print_interval=1000)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    ms.train.Model(step).train(1000, regression_dataset(n=64), callbacks=[monitor, Slow()],
                               dataset_sink_mode=False)
""")


def test_sigkill_leaves_parseable_log(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    log_path = tmp_path / "run" / "rank_0.jsonl"
    here = os.path.dirname(os.path.abspath(__file__))
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run"), here],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if log_path.exists() and log_path.read_bytes().count(b'"kind":"step"') >= 40:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the trainer never wrote 40 step records")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    data = log_path.read_bytes()
    lines = data.split(b"\n")
    complete = lines[:-1]
    for line in complete:                       # every complete line is a strict record
        records.decode(line.decode("utf-8"))
    log = read_rank_log(str(log_path))
    steps = [s["step"] for s in log.steps]
    assert len(steps) >= 40 and steps == list(range(1, len(steps) + 1))
    assert log.end is None                      # no clean end: the process was killed


def _crash_loop():
    """benchmarks/crash_loop.py, the repeated version of the test above (not a package)."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "crash_loop.py")
    spec = importlib.util.spec_from_file_location("crash_loop", os.path.abspath(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("crash_loop", module)      # its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


def test_repeated_kills_in_appended_segments_leave_readable_logs(tmp_path):
    """Four kills into one run directory (resume=True), each followed by a cut last line: from
    the second on, the readers meet torn lines in the middle, and every check of the
    benchmark (lines, checkpoints, summary, report, watch) must pass."""
    tally = _crash_loop().run(iterations=4, seed=3, segments=4, tear=1.0, work=str(tmp_path),
                              kill_after=(0.2, 2.0), keep=True, from_log=True)
    assert tally.failures == [], "\n".join(tally.failures)
    assert tally.iterations == tally.kills == 4 and tally.kills_in_training >= 2
    assert tally.torn_lines >= 2 and tally.torn_in_middle_read >= 1
    assert tally.checkpoints_loaded >= 1 and tally.lines_checked > 100
    log = read_rank_log(str(tmp_path / "run0" / "rank_0.jsonl"))
    assert len(log.of_kind("run")) >= 2 and log.skipped >= 2 and log.end is None
