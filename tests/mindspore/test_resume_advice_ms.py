"""The report's resume advice names good weights (issue #42), under MindSpore's Model.train.

``wrap``'s step, ModelCheckpoint at every epoch's end (4 steps). The LR is set to 1e3 for
step 14 alone, and ``lr_anomaly`` only warns, so that update goes through and wrecks the
weights; step 15 explodes and is withheld: the stop's checkpoint leaves step 15 out but holds
step 14. The advice must name ModelCheckpoint's file of step 12 and say why; loaded as the
report prints it, training goes on clean, as a run that never met the bad LR.
"""
import io
import json
import re
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops
from mindspore.train import Callback, CheckpointConfig, ModelCheckpoint

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.checkpoints.ckpt_scalars import read_scalars
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_dataset

PER_EPOCH, EPOCHS, JUMP, STOP = 4, 6, 14, 15
LR = 1e-2
# The resume section as a user reads it: its heading, why, and the code to run
ADVICE = re.compile(r"## Resume from the last good state, saved after step (\d+)\n\n(.*?)\n\n"
                    r"```python\n(.*?)\n```", re.S)


class JumpLR(Callback):
    """The optimizer's LR 1e3 during step JUMP only (a mistyped LR for one step)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def on_train_step_begin(self, run_context):
        if run_context.original_args().cur_step_num == JUMP:
            ops.assign(self.optimizer.learning_rate, ms.Tensor(1e3, ms.float32))

    def on_train_step_end(self, run_context):
        ops.assign(self.optimizer.learning_rate, ms.Tensor(LR, ms.float32))


def _train(run_dir, *, jump, load=None, initial_epoch=0, resume=False):
    """One Model.train of EPOCHS epochs (from ``initial_epoch``, the state at ``load``);
    returns the console's text."""
    console = io.StringIO()
    monitor = TrainMonitor(str(run_dir / "mw"), stream=console, hardware_interval_s=None,
                           grad_explode=1000.0, on_anomaly={"lr_anomaly": "warn"},
                           resume=resume)
    net = make_regressor()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=LR)
    train_step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    if load is not None:
        ms.load_param_into_net(train_step, ms.load_checkpoint(load))
    saver = ModelCheckpoint(prefix="net", directory=str(run_dir / "ckpt"), config=CheckpointConfig(
        save_checkpoint_steps=PER_EPOCH, keep_checkpoint_max=10))
    ms.train.Model(train_step).train(
        EPOCHS, regression_dataset(n=PER_EPOCH * 8, batch=8),
        callbacks=[*([JumpLR(optimizer)] if jump else []), saver, monitor],
        dataset_sink_mode=False, initial_epoch=initial_epoch)
    return console.getvalue()


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        root = tmp_path_factory.mktemp("advice")
        _train(root / "healthy", jump=False)
        console = _train(root / "run", jump=True)
        log = read_rank_log(str(root / "run" / "mw" / "rank_0.jsonl"))
        stop = log.anomalies[-1]
        markdown = Path(stop["report"]).with_suffix(".md").read_text()
        step, why, code = ADVICE.search(markdown).groups()
        # as a user follows it: the file the code loads, and the epochs its name says are done
        [path] = re.findall(r'load_checkpoint\("([^"]+)"\)', code)
        done = int(re.search(r"-(\d+)_\d+\.ckpt$", path)[1])
        _train(root / "run", jump=False, load=path, initial_epoch=done, resume=True)
    finally:
        ms.set_context(mode=previous)
    return {"root": root, "console": console, "stop": stop, "step": int(step), "why": why,
            "path": path, "log": read_rank_log(str(root / "run" / "mw" / "rank_0.jsonl")),
            "healthy": read_rank_log(str(root / "healthy" / "mw" / "rank_0.jsonl"))}


def test_the_advice_names_the_modelcheckpoint_file_from_before_the_warned_update(story):
    root, stop = story["root"], story["stop"]
    warned = [(a["step"], a["anomaly"], a["actions"]) for a in story["log"].anomalies]
    assert warned[:2] == [(JUMP, "lr_anomaly", ["warn"]),
                          (STOP, "gradient_explode", ["checkpoint", "stop"])]
    # the stop's own checkpoint left step 15 out, but holds step 14's wrecked weights
    saved = ms.load_checkpoint(stop["checkpoint"])
    assert int(saved["global_step"].asnumpy()[0]) == JUMP
    good = str(root / "run" / "ckpt" / "net-3_4.ckpt")
    assert story["path"] == good and story["step"] == 12
    report = json.loads(Path(stop["report"]).read_text())
    assert {k: report["resume_from"][k] for k in ("path", "step", "onset")} == {
        "path": good, "step": 12, "onset": JUMP}
    assert story["why"] == report["resume_from"]["why"] + "."
    assert f"step {JUMP}'s update went into the weights though lr_anomaly was found there" \
        in story["why"]
    assert f"the last good state on disk is {good} (saved after step 12)" in \
        " ".join(report["notes"])
    assert f'load_checkpoint("{good}")' in report["resume"]
    # the console says it beside the anomaly's line, which names mindwatch's checkpoint
    assert f"note: gradient_explode at step {STOP}: resume from {good} (saved after step 12)" \
        in story["console"]
    assert f"[checkpoint+stop -> {stop['checkpoint']}]" in story["console"]


def test_resuming_as_advised_trains_on_clean_as_a_run_without_the_bad_lr(story):
    log, healthy = story["log"], story["healthy"]
    runs = log.of_kind("run")
    assert [e["reason"] for e in log.of_kind("end")] == ["stopped", "completed"]
    resumed = [s for s in log.steps if s["time"] > runs[1]["time"]]
    assert not [a for a in log.anomalies if a["time"] > runs[1]["time"]]
    assert not any(s["skipped"] for s in resumed)
    # MindSpore counts a resumed Model.train's steps from 1: by position, steps 13 to 24
    expected = [s["loss"] for s in healthy.steps][12:]
    assert len(resumed) == len(expected) == PER_EPOCH * EPOCHS - 12
    assert [s["loss"] for s in resumed] == pytest.approx(expected, rel=1e-5)


def test_a_checkpoints_appended_scalars_are_read_without_its_tensors(tmp_path):
    big = ms.Tensor(np.ones((256, 256), np.float32))
    ms.save_checkpoint([{"name": "w", "data": big}], str(tmp_path / "a.ckpt"),
                       append_dict={"step_num": 7, "epoch_num": 2})
    ms.save_checkpoint([{"name": "w", "data": big}], str(tmp_path / "b.ckpt"), crc_check=True,
                       append_dict={"step_num": 9})
    assert read_scalars(str(tmp_path / "a.ckpt"), ["step_num", "epoch_num", "w"]) == {
        "step_num": 7.0, "epoch_num": 2.0}               # w: a tensor, not a scalar
    assert read_scalars(str(tmp_path / "b.ckpt"), ["step_num"]) == {"step_num": 9.0}
    (tmp_path / "c.ckpt").write_bytes(b"not a checkpoint")
    assert read_scalars(str(tmp_path / "c.ckpt"), ["step_num"]) == {}
    assert read_scalars(str(tmp_path / "missing.ckpt"), ["step_num"]) == {}
