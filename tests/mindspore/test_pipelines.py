"""What docs/pipelines.md says beyond the conformance matrix: Model.fit's evaluation is part
of the run (progress for the hang watchdog, results in the epoch record), an evaluation
outside training writes nothing, MindSpore's LR callbacks find wrap's optimizer, the
functional step's aux outputs, and the CPU's dropped sink mode is said."""
import io
import time

import mindspore as ms
import numpy as np
import pytest
from mindspore import dataset as ds
from mindspore import nn
from mindspore.train import ReduceLROnPlateau

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, regression_dataset


def _fit_model(monitor, net, optimizer):
    loss = nn.MSELoss()
    step = monitor.wrap(nn.WithLossCell(net, loss), optimizer)
    return ms.train.Model(step, eval_network=nn.WithEvalCell(net, loss), metrics={"mae"},
                          eval_indexes=[0, 1, 2])


class _SlowBatches:
    """A validation source whose every batch takes ``delay`` seconds."""

    def __init__(self, delay, batches=8):
        self.x, self.y = regression_arrays(8 * batches, seed=1)
        self.delay = delay

    def __len__(self):
        return len(self.x) // 8

    def __getitem__(self, index):
        time.sleep(self.delay)
        rows = slice(index * 8, (index + 1) * 8)
        return self.x[rows], self.y[rows]


@pytest.mark.waits
def test_a_long_evaluation_between_epochs_is_no_hang(tmp_path, pynative_mode):
    # 8 validation batches of 0.3 s: the evaluation lasts 2.4 s, over twice the timeout, but
    # every batch ends well inside it. PYNATIVE: no graph compiles in the middle (a loaded
    # CI machine compiling the eval graph could take a timeout's worth by itself)
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None,
                           hang_timeout_s=1.0)
    model = _fit_model(monitor, net, nn.Adam(net.trainable_params(), 1e-2))
    valid = ds.GeneratorDataset(_SlowBatches(0.3), ["x", "y"], shuffle=False)
    model.fit(2, regression_dataset(n=32), valid, callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [a["anomaly"] for a in log.anomalies] == []
    assert log.end["reason"] == "completed" and log.end["steps"] == 8
    evaluations = [e["eval"] for e in log.of_kind("epoch")]
    assert [sorted(e) for e in evaluations] == [["eval_loss", "mae"]] * 2
    assert evaluations[1]["mae"] < evaluations[0]["mae"]          # it learns


@pytest.mark.waits
def test_an_evaluation_that_hangs_is_reported(tmp_path, pynative_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None,
                           hang_timeout_s=1.0)
    model = _fit_model(monitor, net, nn.Adam(net.trainable_params(), 1e-2))
    valid = ds.GeneratorDataset(_SlowBatches(3.0, batches=1), ["x", "y"], shuffle=False)
    model.fit(1, regression_dataset(n=32), valid, callbacks=[monitor], dataset_sink_mode=False)
    hangs = [a for a in read_rank_log(str(tmp_path / "rank_0.jsonl")).anomalies
             if a["anomaly"] == "hang"]
    assert [h["step"] for h in hangs] == [4]


def test_the_epoch_line_shows_the_evaluation(tmp_path, graph_mode):
    stream = io.StringIO()
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=stream, hardware_interval_s=None)
    model = _fit_model(monitor, net, nn.Adam(net.trainable_params(), 1e-2))
    model.fit(1, regression_dataset(n=32), regression_dataset(n=16, seed=1),
              callbacks=[monitor], dataset_sink_mode=False)
    epoch = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("epoch")[0]
    line = next(line for line in stream.getvalue().splitlines() if "epoch 1 done" in line)
    assert line.endswith(f"; evaluation: mae {epoch['eval']['mae']:.4g}, eval_loss "
                         f"{epoch['eval']['eval_loss']:.4g}")


def test_an_evaluation_outside_training_writes_nothing(tmp_path, graph_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)
    model = _fit_model(monitor, net, nn.Adam(net.trainable_params(), 1e-2))
    model.eval(regression_dataset(n=16), callbacks=[monitor], dataset_sink_mode=False)
    assert not (tmp_path / "rank_0.jsonl").exists() or \
        (tmp_path / "rank_0.jsonl").read_text() == ""
    model.train(1, regression_dataset(n=32), callbacks=[monitor], dataset_sink_mode=False)
    model.eval(regression_dataset(n=16), callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [r["kind"] for r in log.records if r["kind"] in ("run", "end")] == ["run", "end"]
    assert log.records[-1]["kind"] == "end" and log.end["reason"] == "completed"


def test_reduce_lr_on_plateau_lowers_the_lr_wrap_applies(tmp_path, graph_mode):
    # no epoch counts as better (min_delta), so after epoch 2 the LR is halved
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    model = _fit_model(monitor, net, optimizer)
    model.fit(3, regression_dataset(n=32), regression_dataset(n=16, seed=1),
              callbacks=[ReduceLROnPlateau(patience=0, factor=0.5, min_delta=1e9), monitor],
              dataset_sink_mode=False)
    steps = read_rank_log(str(tmp_path / "rank_0.jsonl")).steps
    lrs = {e: {round(s["lr"], 8) for s in steps if s["epoch"] == e} for e in (1, 2, 3)}
    assert lrs == {1: {0.01}, 2: {0.01}, 3: {0.005}}
    # halved again at epoch 3's end, for steps that never come
    assert float(optimizer.learning_rate.asnumpy()) == pytest.approx(0.0025)


def test_the_functional_step_returns_the_forwards_aux(tmp_path, mode):
    net = make_regressor()
    loss_fn = nn.MSELoss()
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)

    def forward_fn(x, y):
        logits = net(x)
        return loss_fn(logits, y), logits

    train_step = monitor.jit_step(forward_fn, nn.SGD(net.trainable_params(), 0.01),
                                  has_aux=True)
    x, y = (ms.Tensor(a) for a in regression_arrays(8))
    expected = net(x).asnumpy()                  # the logits before the step's update
    outputs = train_step(x, y)
    assert np.allclose(outputs.aux[0].asnumpy(), expected, rtol=1e-5, atol=1e-6)
    assert outputs.loss == pytest.approx(float(loss_fn(ms.Tensor(expected), y).asnumpy()),
                                         rel=1e-5)
    assert monitor.observe(step=1, outputs=outputs) == []
    monitor.close()
    assert read_rank_log(str(tmp_path / "rank_0.jsonl")).steps[0]["grad_norm"] == \
        outputs.grad_norm


def test_observe_refuses_outputs_that_are_not_a_steps(tmp_path):
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)
    with pytest.raises(TypeError, match=r"monitor\.jit_step"):
        monitor.observe(step=1, outputs=(1.0, 2.0))
    with pytest.raises(TypeError, match="forward_fn must be a function"):
        monitor.jit_step("not a function", nn.SGD(make_regressor().trainable_params()))
    monitor.close()
