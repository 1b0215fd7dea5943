"""The first update that would wreck the weights is withheld on its own step, with no history:
Adam at LR 1e3 (a typo for 1e-3) moves every weight by ~1e3 on step 1, which the LR jump rule,
having no peak yet, cannot see (detectors/update_size.py). Under wrap in both modes, jit_step,
SGD, and max_lr."""
import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, regression_dataset


def _weights(net):
    return {p.name: p.asnumpy().copy() for p in net.get_parameters()}


def _first_step(log_dir):
    log = read_rank_log(str(log_dir / "rank_0.jsonl"))
    return log.steps[0], [a for a in log.anomalies if a["step"] == 1]


@pytest.mark.parametrize("mode", ["graph_mode", "pynative_mode"])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_learning_rate_a_million_times_too_large_is_withheld_on_step_1(
        tmp_path, quiet, request, mode, optimizer):
    request.getfixturevalue(mode)
    net = make_regressor()
    before = _weights(net)
    params = net.trainable_params()
    opt = nn.Adam(params, learning_rate=1e3) if optimizer == "adam" else \
        nn.SGD(params, learning_rate=1e3)
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), opt)
    ms.train.Model(step).train(1, regression_dataset(32), callbacks=[monitor],
                               dataset_sink_mode=False)
    record, (anomaly,) = _first_step(tmp_path)
    assert record["skipped"] is True and record["lr"] == 1e3
    assert anomaly["anomaly"] == "lr_anomaly" and anomaly["actions"] == ["checkpoint", "stop"]
    assert "would move the weights by" in anomaly["message"]
    assert anomaly["threshold"] < 10                     # the LR a sane update stays under
    after = _weights(net)
    assert all(np.array_equal(before[name], after[name]) for name in before)
    # the checkpoint of the stop holds the weights as they were: nothing to distrust
    saved = ms.load_checkpoint(anomaly["checkpoint"])
    assert all(np.array_equal(saved[name].asnumpy(), before[name]) for name in before)


def test_jit_steps_first_update_is_judged_against_the_weights_too(tmp_path, quiet,
                                                                   pynative_mode):
    net = make_regressor()
    before = _weights(net)
    loss_fn = nn.MSELoss()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None)

    def forward_fn(x, y):
        return loss_fn(net(x), y)

    train_step = monitor.jit_step(forward_fn, nn.Adam(net.trainable_params(), learning_rate=1e3))
    x, y = regression_arrays(16)
    for step in (1, 2):
        monitor.observe(step=step, outputs=train_step(ms.Tensor(x[:8]), ms.Tensor(y[:8])))
        if monitor.stop_requested:
            break
    monitor.close()
    record, (anomaly,) = _first_step(tmp_path)
    assert record["skipped"] is True and anomaly["anomaly"] == "lr_anomaly"
    assert all(np.array_equal(before[k], v) for k, v in _weights(net).items())


def test_max_lr_withholds_the_first_step_above_it(tmp_path, quiet, graph_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None, max_lr=0.005)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()),
                        nn.Adam(net.trainable_params(), learning_rate=0.01))
    ms.train.Model(step).train(1, regression_dataset(32), callbacks=[monitor],
                               dataset_sink_mode=False)
    record, (anomaly,) = _first_step(tmp_path)
    assert record["skipped"] is True
    assert (anomaly["anomaly"], anomaly["value"], anomaly["threshold"]) == (
        "lr_anomaly", pytest.approx(0.01), 0.005)
