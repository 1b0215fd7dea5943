"""A ``Model.train`` run resumed in a new process (``resume=True``) judges its first step
against the run's history, read back from its log: a mistyped LR on the resume is an
``lr_anomaly`` on that very step, and ``wrap``'s graph withholds its update. Two real
processes: 10 healthy steps at LR 1e-3 with a checkpoint of step 10, then the resume from
that checkpoint with the LR mistyped as 500."""
import os
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest

from mindwatch.runlog import read_rank_log

pytestmark = pytest.mark.timeout(300)

HERE = os.path.dirname(os.path.abspath(__file__))
# argv: log_dir, checkpoint, lr, "resume" or "first", helpers' folder
TRAINER = textwrap.dedent("""
    import sys
    import mindspore as ms
    from mindspore import nn
    sys.path.insert(0, sys.argv[5])
    from ms_helpers import make_regressor, regression_dataset
    from mindwatch.mindspore import TrainMonitor

    log_dir, checkpoint, lr, resume = sys.argv[1], sys.argv[2], float(sys.argv[3]), \\
        sys.argv[4] == "resume"
    ms.set_context(mode=ms.GRAPH_MODE)
    net = make_regressor()
    monitor = TrainMonitor(log_dir, resume=resume, hardware_interval_s=None,
                           print_interval=1000, stop_exit_code=None)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params(), lr))
    if resume:      # the weights and Adam's moments of step 10; the LR is the one given
        saved = ms.load_checkpoint(checkpoint)
        ms.load_param_into_net(step, {name: value for name, value in saved.items()
                                      if "learning_rate" not in name})
    ms.train.Model(step).train(1, regression_dataset(n=80), callbacks=[monitor],
                               dataset_sink_mode=False)
    if not resume:
        ms.save_checkpoint(step, checkpoint)
""")


def train(tmp_path, lr, mode):
    subprocess.run([sys.executable, "-c", TRAINER, str(tmp_path / "run"),
                    str(tmp_path / "step10.ckpt"), str(lr), mode, HERE],
                   check=True, timeout=240, capture_output=True, text=True)


def net_weights(path):
    """The model's weights in a checkpoint of the train cell (not the optimizer's state)."""
    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path)).items()
            if name.startswith("network.") or name.split(".")[0] in ("inp", "norm", "out")}


def test_a_mistyped_lr_at_the_resume_is_withheld_on_its_first_step(tmp_path):
    train(tmp_path, 1e-3, "first")
    train(tmp_path, 500.0, "resume")
    log = read_rank_log(str(tmp_path / "run" / "rank_0.jsonl"))
    _, resumed = log.of_kind("run")
    steps = [s for s in log.steps if s["time"] > resumed["time"]]
    # Model.train counts the new process's steps from 1: the run's 11th step
    assert [s["step"] for s in log.steps[:10]] == list(range(1, 11))
    assert [(s["step"], s["lr"], s["skipped"]) for s in steps] == [(1, 500.0, True)]
    [anomaly] = log.anomalies
    assert (anomaly["anomaly"], anomaly["step"], anomaly["actions"]) == (
        "lr_anomaly", 1, ["checkpoint", "stop"])
    assert "the highest this run has trained at (0.001" in anomaly["message"]
    [said] = [n["message"] for n in log.of_kind("notice") if n["time"] > resumed["time"]]
    assert said.startswith("resumed after step 10: the history of the last 10 steps restored "
                           "from rank_0.jsonl (the rules' windows, the LR peak 0.001, ")
    # the update was withheld: the weights checkpointed after it are step 10's, bit for bit
    before, after = net_weights(tmp_path / "step10.ckpt"), net_weights(anomaly["checkpoint"])
    assert sorted(before) == sorted(after) and len(before) >= 6
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)
