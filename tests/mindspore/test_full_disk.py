"""The issue as a user met it: `mindwatch demo --out DIR` with DIR on a small filesystem used
to die at step ~750 with ENOSPC out of the callback. Training must go on to the end."""
import shutil
import subprocess
import sys

import mindspore as ms
import pytest
from mindspore import nn
from mindspore.train import Callback

from mindwatch import SinkError, records
from mindwatch.mindspore import TrainMonitor
from mindwatch.sinks import jsonl
from ms_helpers import make_regressor, regression_dataset

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]


def test_demo_on_a_full_disk_trains_to_the_end(small_fs):
    run_dir = small_fs / "run"
    free = shutil.disk_usage(small_fs).free
    (small_fs / "filler").write_bytes(b"\0" * (free - 35_000))   # 35 KB left: ~35 steps
    result = subprocess.run([*MINDWATCH, "demo", "--out", str(run_dir), "--steps", "100"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "training completed after 100 steps" in result.stdout    # the console still works
    said = [line for line in result.stdout.splitlines() if "cannot be written" in line]
    assert len(said) == 1 and "No space left on device" in said[0], result.stdout[-3000:]
    assert "report" in result.stderr and "could not be written" in result.stderr
    steps = []
    for raw in (run_dir / "rank_0.jsonl").read_bytes().split(b"\n"):
        try:
            record = records.decode(raw.decode("utf-8"))
        except ValueError:
            continue                                  # the one torn line, or the empty tail
        if record["kind"] == "step":
            steps.append(record["step"])
    assert steps == list(range(1, len(steps) + 1)) and 20 < len(steps) < 100


def test_on_sink_error_raise_stops_training_then_raises(tmp_path, quiet, graph_mode,
                                                        monkeypatch):
    monkeypatch.setattr(jsonl, "RECHECK_S", 0.0)
    run_dir = tmp_path / "run"
    seen = []

    class BreakTheRunDirectory(Callback):        # runs before the monitor at each step end
        def on_train_step_end(self, run_context):
            step = run_context.original_args().cur_step_num
            seen.append(step)
            if step == 3:
                shutil.rmtree(run_dir)
                run_dir.write_text("a file where the run directory was")

    net = make_regressor()
    monitor = TrainMonitor(str(run_dir), stream=quiet, hardware_interval_s=None,
                           on_sink_error="raise")
    model = ms.train.Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()),
                                        nn.SGD(net.trainable_params(), 0.01)))
    with pytest.raises(SinkError, match=r"run log .*rank_0\.jsonl cannot be written"):
        model.train(2, regression_dataset(n=64), callbacks=[BreakTheRunDirectory(), monitor],
                    dataset_sink_mode=False)
    assert seen == [1, 2, 3]                      # stopped cleanly after the failing step
    assert monitor.monitor.closed
