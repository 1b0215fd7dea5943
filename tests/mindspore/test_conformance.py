"""The conformance matrix (conformance.py) run for real: a small regressor trained on the CPU
through every entry point, with the fault injected at one step, then the run log, `mindwatch
summary`, the checkpoint and the reports checked against the table."""
import io
import json
import math
import os
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import dataset as ds
from mindspore import nn, ops
from mindspore.train import (
    CheckpointConfig,
    EarlyStopping,
    LossMonitor,
    ModelCheckpoint,
    ReduceLROnPlateau,
    SummaryCollector,
    TimeMonitor,
)
from mindspore.train.callback import Callback

from conformance import EPOCHS, FAULT_STEP, SETTINGS, STEPS_PER_EPOCH, Case, cases, markdown_table
from mindwatch.cli import main as cli
from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays

pytestmark = pytest.mark.conformance
BATCH = 8
LR = 1e-2


class FaultyLoss(nn.Cell):
    """MSE whose labels and offset a test sets between steps: a NaN or scaled label batch,
    or a constant +Inf added to the loss (its gradient is the MSE's, finite)."""

    def __init__(self):
        super().__init__()
        self.mse = nn.MSELoss()
        self.label_scale = ms.Parameter(ms.Tensor(1.0, ms.float32), name="label_scale",
                                        requires_grad=False)
        self.offset = ms.Parameter(ms.Tensor(0.0, ms.float32), name="loss_offset",
                                   requires_grad=False)

    def construct(self, logits, label):
        return self.mse(logits, label * self.label_scale) + self.offset

    def inject(self, fault, on):
        scale = {"nan": math.nan, "explode": 1e7, "spike": 30.0}.get(fault) if on else None
        # assign, not set_data: a graph compiled by ms.jit keeps reading the old tensor
        ops.assign(self.label_scale, ms.Tensor(scale or 1.0, ms.float32))
        ops.assign(self.offset, ms.Tensor(math.inf if on and fault == "inf_loss" else 0.0,
                                          ms.float32))


class Injector(Callback):
    """Sets the fault for FAULT_STEP alone; keeps the network's weights after every step."""

    def __init__(self, loss, fault, net):
        self.loss, self.fault, self.net, self.weights = loss, fault, net, {}

    def on_train_step_begin(self, run_context):
        self.loss.inject(self.fault, run_context.original_args().cur_step_num == FAULT_STEP)

    def on_train_step_end(self, run_context):
        self.weights[run_context.original_args().cur_step_num] = _weights(self.net)


def _weights(net):
    return {p.name: p.asnumpy().copy() for p in net.trainable_params()}


def _dataset(n=STEPS_PER_EPOCH * BATCH, seed=0):
    x, y = regression_arrays(n, seed)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


def _optimizer(net, fault):
    lr = LR
    if fault == "lr_blowup":
        lr = [LR] * (FAULT_STEP - 1) + [1e3] * (EPOCHS * STEPS_PER_EPOCH - FAULT_STEP + 1)
    return nn.Adam(net.trainable_params(), learning_rate=lr)


def _ms_callback(case, log_dir):
    if case.callback is None:
        return []
    name = case.callback
    if name == "ModelCheckpoint":
        return [ModelCheckpoint(prefix="net", directory=str(log_dir / "ckpt"),
                                config=CheckpointConfig(save_checkpoint_steps=4))]
    if name == "SummaryCollector":
        return [SummaryCollector(str(log_dir / "collector"), collect_freq=4)]
    if name == "EarlyStopping":
        return [EarlyStopping(patience=5)]
    if name == "ReduceLROnPlateau":
        return [ReduceLROnPlateau(patience=0, factor=0.5)]
    return [{"LossMonitor": LossMonitor, "TimeMonitor": TimeMonitor}[name]()]


def _train_model(case, log_dir, monitor, net, loss, optimizer):
    injector = Injector(loss, case.fault, net)
    # Model.fit with a validation set needs metrics; "metrics" trains, then evaluates.
    metrics = {"fit": {"loss"}, "metrics": {"mae"}}.get(case.entry)
    if case.build == "wrap":
        step = monitor.wrap(nn.WithLossCell(net, loss), optimizer)
        # the working form beside wrap: an eval network and which of its outputs are what
        model = (ms.train.Model(step, eval_network=nn.WithEvalCell(net, loss), metrics=metrics,
                                eval_indexes=[0, 1, 2])
                 if metrics else ms.train.Model(step))
    else:
        model = ms.train.Model(net, loss, optimizer, metrics=metrics)
    callbacks = [injector, *_ms_callback(case, log_dir), monitor]
    if case.entry == "fit":
        model.fit(EPOCHS, _dataset(), _dataset(32, seed=1), callbacks=callbacks,
                  dataset_sink_mode=case.sink)
    else:
        model.train(EPOCHS, _dataset(), callbacks=callbacks, dataset_sink_mode=case.sink)
    if case.entry == "metrics":
        # after training, an evaluation with the same callbacks adds nothing to the log
        result = model.eval(_dataset(32, seed=1), callbacks=[monitor], dataset_sink_mode=False)
        assert set(result) == {"mae"}
    return injector.weights


def _train_loop(case, monitor, net, loss, optimizer):
    """The tutorials' loop: with the helper (wrap) or with their own jitted step (loop)."""
    def forward_fn(x, y):
        return loss(net(x), y)

    if case.build == "wrap":
        step = monitor.jit_step(forward_fn, optimizer)
    else:
        grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)

        @ms.jit
        def own_step(x, y):
            value, grads = grad_fn(x, y)
            optimizer(grads)
            return value

    weights, n = {}, 0
    for epoch in range(1, EPOCHS + 1):
        for x, y in _dataset().create_tuple_iterator():
            n += 1
            loss.inject(case.fault, n == FAULT_STEP)
            if case.build == "wrap":
                found = monitor.observe(step=n, epoch=epoch, outputs=step(x, y))
            else:
                lr = float(optimizer.get_lr().asnumpy())       # before the step: its own LR
                found = monitor.observe(step=n, epoch=epoch, loss=own_step(x, y), lr=lr)
            weights[n] = _weights(net)
            if any(anomaly.stops for anomaly in found):
                monitor.close()
                return weights
    monitor.close()
    return weights


def run(case: Case, log_dir: Path):
    ms.set_context(mode=getattr(ms, case.mode))
    net, loss = make_regressor(), FaultyLoss()
    optimizer = _optimizer(net, case.fault)
    settings = dict(SETTINGS)
    if case.skip_spike:
        settings["on_anomaly"] = {"loss_spike": "skip"}
    monitor = TrainMonitor(str(log_dir), stream=io.StringIO(), **settings)
    if case.entry == "functional":
        return _train_loop(case, monitor, net, loss, optimizer)
    return _train_model(case, log_dir, monitor, net, loss, optimizer)


def check(case: Case, log_dir: Path, weights, capsys):
    expected = case.outcome
    log = read_rank_log(str(log_dir / "rank_0.jsonl"))
    last = FAULT_STEP if expected.end == "stopped" else EPOCHS * STEPS_PER_EPOCH
    assert [s["step"] for s in log.steps] == list(range(1, last + 1))
    assert log.end["reason"] == expected.end and log.end["steps"] == last
    assert [s["step"] for s in log.steps if s["skipped"]] == list(expected.skipped)
    assert cli(["summary", str(log_dir)]) == expected.exit_code
    capsys.readouterr()
    anomalies = log.anomalies
    if expected.first is None:
        assert anomalies == []
    else:
        assert anomalies[0]["step"] == FAULT_STEP
        assert expected.first in {a["anomaly"] for a in anomalies if a["step"] == FAULT_STEP}
    epochs = log.of_kind("epoch")
    if expected.end == "completed":
        assert [e["epoch"] for e in epochs] == [1, 2]
    if case.entry == "fit" and expected.end == "completed":
        # each epoch's evaluation recorded (eval_loss: Model.fit's own, beside the metrics)
        assert all(math.isfinite(e["eval"]["eval_loss"]) for e in epochs)
    assert len(log.of_kind("run")) == 1 and log.records[-1]["kind"] == "end"
    _check_checkpoint(expected.checkpoint, anomalies, weights)
    _check_reports(expected.advice, anomalies)


def _check_checkpoint(expected, anomalies, weights):
    written = {a["checkpoint"] for a in anomalies if a["checkpoint"]}
    if expected is None:
        assert written == set()
        return
    assert len(written) == 1
    saved = ms.load_checkpoint(written.pop())
    good, after = weights[FAULT_STEP - 1], weights[FAULT_STEP]
    names = sorted(good)
    if expected == "good":
        for name in names:
            assert np.array_equal(saved[name].asnumpy(), good[name]), name
    else:
        assert any(not np.array_equal(saved[name].asnumpy(), good[name]) for name in names)
        for name in names:
            assert np.array_equal(saved[name].asnumpy(), after[name], equal_nan=True), name


def _check_reports(advice, anomalies):
    reported = [a for a in anomalies if a["report"]]
    assert len({a["report"] for a in reported}) == len(reported)     # each its own file
    for anomaly in reported:
        report = json.loads(Path(anomaly["report"]).read_text())
        assert (report["anomaly"], report["step"]) == (anomaly["anomaly"], anomaly["step"])
        if advice is not None:
            assert any(advice in note for note in report["notes"]), report["notes"]
    if advice is not None:
        assert reported


CASES = cases()
_FRESH = {"SummaryCollector"}      # one SummaryRecord per process: a child pytest of its own


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.id, marks=[pytest.mark.fresh_process] if c.callback in _FRESH else [])
    for c in CASES])
def test_conformance(case, tmp_path, capsys):
    previous = ms.get_context("mode")
    try:
        weights = run(case, tmp_path)
    finally:
        ms.set_context(mode=previous)
    check(case, tmp_path, weights, capsys)
    notices = [n["message"] for n in read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind(
        "notice")]
    if case.sink:
        assert any("dataset_sink_mode=True was asked for" in n for n in notices)
    if case.callback == "ModelCheckpoint":
        _check_model_checkpoint(case, tmp_path, weights)


def _check_model_checkpoint(case, log_dir, weights):
    """ModelCheckpoint's own files: with wrap its last file (written by its end() after the
    stop) holds the last good weights; without, the report names its last good file and
    says its end() saves the bad weights once more."""
    files = sorted((log_dir / "ckpt").glob("net-*.ckpt"), key=os.path.getmtime)
    newest = ms.load_checkpoint(str(files[-1]))
    good = weights[FAULT_STEP - 1]
    same = all(np.array_equal(newest[name].asnumpy(), good[name]) for name in good)
    report = json.loads((log_dir / "anomalies" / f"step{FAULT_STEP}_rank0.json").read_text())
    if case.build == "wrap":
        assert same
        return
    assert not same
    # saves every 4 steps: the last before the fault is after step 12 (net-1_12.ckpt)
    last_good = str(log_dir / "ckpt" / "net-1_12.ckpt")
    assert any(f"the last good state on disk is {last_good}" in n for n in report["notes"])
    assert any("saves the weights again when training ends" in n for n in report["notes"])
    assert f'load_checkpoint("{last_good}")' in report["resume"]


def test_the_docs_show_the_conformance_table():
    docs = Path(__file__).parents[2] / "docs" / "pipelines.md"
    assert markdown_table() in docs.read_text(), "regenerate docs/pipelines.md's table from " \
        "tests/mindspore/conformance.py markdown_table()"


def test_every_entry_point_meets_every_fault():
    pairs = {(c.entry, c.fault) for c in CASES}
    from conformance import ENTRIES, FAULTS
    assert pairs == {(e, f) for e in ENTRIES for f in FAULTS}
