"""TrainMonitor inside real MindSpore training: ways in, sink mode, stop, errors."""
import math

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops
from mindspore.train import Callback
from mindspore.train.callback import RunContext, _InternalCallbackParam

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, regression_dataset, weights_of


def _log(tmp_path):
    return read_rank_log(str(tmp_path / "rank_0.jsonl"))


class _Spy(Callback):
    """Keeps what a plain callback sees after each step."""

    def __init__(self, cell=None):
        self.cell, self.outputs, self.weights = cell, {}, {}

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        self.outputs[cb.cur_step_num] = cb.net_outputs
        if self.cell is not None:
            self.weights[cb.cur_step_num] = weights_of(self.cell)


def test_sink_mode_records_carry_true_step_numbers(tmp_path, quiet, graph_mode):
    """On Ascend/GPU the callback fires once per sink and cur_step_num jumps by the sink size;
    the CPU falls back to one callback per step, so the sink is driven by hand here."""
    net = make_regressor()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=nn.CosineDecayLR(0.001, 0.1, 20))
    monitor = TrainMonitor(str(tmp_path), stream=quiet, print_interval=10, batch_size=8)
    step_cell = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    cb = _InternalCallbackParam()
    cb.cur_step_num, cb.cur_epoch_num, cb.epoch_num, cb.batch_num = 0, 1, 1, 12
    cb.train_network, cb.optimizer, cb.dataset_sink_mode = step_cell, None, True
    context = RunContext(cb)
    x, y = (ms.Tensor(a) for a in regression_arrays(8))
    monitor.on_train_begin(context)
    norms = []
    for _ in range(3):
        for _ in range(4):
            cb.net_outputs = step_cell(x, y)
        norms.append(float(cb.net_outputs[1].asnumpy()[1]))
        cb.cur_step_num += 4
        monitor.on_train_step_end(context)
    monitor.on_train_epoch_end(context)
    monitor.on_train_end(context)
    log = _log(tmp_path)
    steps = log.steps
    assert [s["step"] for s in steps] == [4, 8, 12]
    assert [s["steps_covered"] for s in steps] == [4, 4, 4]
    assert [s["grad_norm"] for s in steps] == pytest.approx(norms, rel=1e-6)
    cosine = nn.CosineDecayLR(0.001, 0.1, 20)
    for record in steps:   # the LR of the last step of each sink
        want = float(cosine(ms.Tensor(record["step"] - 1, ms.int32)).asnumpy())
        assert record["lr"] == pytest.approx(want, rel=1e-6)
    assert log.of_kind("epoch")[0]["steps"] == 12
    assert log.end["steps"] == 12
    assert "step 12/12 | loss" in quiet.getvalue()


class _MindFormersStyleStep(nn.Cell):
    """A user's train cell with the output tuple of MindSpore Transformers' MFTrainOneStepCell:
    (loss, overflow, scaling_sens, learning_rate, global_norm[, local_norm, size])."""

    def __init__(self, network, optimizer, seven):
        super().__init__(auto_prefix=False)
        self.network, self.optimizer, self.seven = network, optimizer, seven
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, x, y):
        loss = self.network(x, y)
        grads = self.grad(self.network, self.weights)(x, y)
        squares = ops.stack([ops.reduce_sum(g * g) for g in grads])
        global_norm = ops.sqrt(squares.sum())
        overflow = ops.logical_not(ops.isfinite(global_norm))
        learning_rate = self.optimizer.get_lr()
        if not overflow:
            loss = ops.depend(loss, self.optimizer(grads))
        scaling_sens = ops.ones((), ms.float32) * 1024.0
        if self.seven:
            return loss, overflow, scaling_sens, learning_rate, global_norm, squares, ops.ones((1,))
        return loss, overflow, scaling_sens, learning_rate, global_norm


@pytest.mark.parametrize("seven", [False, True], ids=["5-tuple", "7-tuple"])
def test_mindformers_tuple_is_read(tmp_path, quiet, graph_mode, seven):
    net = make_regressor()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=nn.CosineDecayLR(0.001, 0.1, 6))
    cell = _MindFormersStyleStep(nn.WithLossCell(net, nn.MSELoss()), optimizer, seven)
    monitor = TrainMonitor(str(tmp_path), stream=quiet, on_anomaly="warn")
    spy = _Spy()
    ms.train.Model(cell).train(1, regression_dataset(n=48, nan_at=4),
                               callbacks=[spy, monitor], dataset_sink_mode=False)
    log = _log(tmp_path)
    assert not log.of_kind("notice")               # gradient checks are on: norms arrive
    for record in log.steps:
        out = [o.asnumpy() for o in spy.outputs[record["step"]]]
        assert record["loss"] == pytest.approx(float(out[0]), nan_ok=True)
        assert record["grad_norm"] == pytest.approx(float(out[4]), nan_ok=True)
        assert record["lr"] == pytest.approx(float(out[3]))
        assert record["skipped"] is bool(out[1])
        assert record["loss_scale"] == 1024.0
    assert [s["skipped"] for s in log.steps] == [False, False, False, True, False, False]
    assert math.isnan(log.steps[3]["grad_norm"])
    assert {a["anomaly"] for a in log.anomalies} == {"gradient_nonfinite", "loss_nonfinite"}


def test_plain_model_says_once_how_to_enable_gradient_checks(tmp_path, quiet, graph_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    ms.train.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01)).train(
        2, regression_dataset(n=32), callbacks=[monitor], dataset_sink_mode=False)
    log = _log(tmp_path)
    notices = log.of_kind("notice")
    assert len(notices) == 1 and "monitor.wrap(net_with_loss, optimizer)" in notices[0]["message"]
    assert quiet.getvalue().count("gradient checks are off") == 1
    assert all(s["grad_norm"] is None and s["loss"] is not None for s in log.steps)
    assert len(log.steps) == 8 and log.end["reason"] == "completed"


def test_stop_checkpoints_the_last_good_weights(tmp_path, quiet, mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    step_cell = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()),
                             nn.Adam(net.trainable_params(), learning_rate=0.01))
    spy = _Spy(step_cell)
    ms.train.Model(step_cell).train(3, regression_dataset(n=64, nan_at=3),
                                    callbacks=[spy, monitor], dataset_sink_mode=False)
    log = _log(tmp_path)
    assert [s["step"] for s in log.steps] == [1, 2, 3]           # stopped right after step 3
    assert log.steps[2]["skipped"] is True
    assert log.end["reason"] == "stopped"
    anomaly = log.anomalies[0]
    assert anomaly["step"] == 3 and "stop" in anomaly["actions"]
    saved = ms.load_checkpoint(anomaly["checkpoint"])
    assert anomaly["checkpoint"].endswith("checkpoints/anomaly_step3_rank0.ckpt")
    good = spy.weights[2]                                          # after step 2, bit for bit
    # mindwatch's own step limits stay out: the host recomputes them
    assert set(saved) == {name for name in good if not name.startswith("mindwatch_")}
    for name, value in good.items():
        if name.startswith("mindwatch_"):
            continue
        assert np.array_equal(saved[name].asnumpy(), value), name
    report = (tmp_path / "anomalies" / "step3_rank0.md").read_text()
    assert "last good weights" in report and "load_checkpoint" in report
    assert not list((tmp_path / "checkpoints").glob("*.tmp*"))


class _Boom(Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == 3:
            raise RuntimeError("data loader died")


def test_exception_inside_training_ends_the_log_with_error(tmp_path, quiet, graph_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    model = ms.train.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01))
    with pytest.raises(RuntimeError, match="data loader died"):
        model.train(1, regression_dataset(n=64), callbacks=[monitor, _Boom()],
                    dataset_sink_mode=False)
    log = _log(tmp_path)
    assert log.end["reason"] == "error" and "data loader died" in log.end["error"]
    assert [s["step"] for s in log.steps] == [1, 2, 3]
