"""on_anomaly "skip" with wrap: the update of an anomalous step is withheld in the graph."""
import json

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.reading.outputs import read_outputs
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, weights_of

BATCH = 8
# Short spike windows keep the runs short; the rule is the same.
SPIKES = dict(spike_window=16, spike_warmup=8, hardware_interval_s=None)


def _batches(n, poison=()):
    """``n`` batches; those in ``poison`` (1-based) have their targets scaled by 1e3."""
    x, y = regression_arrays(n * BATCH, seed=3)
    for index in poison:
        y[(index - 1) * BATCH: index * BATCH] *= 1e3
    return [(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]) for i in range(n)]


def _train(log_dir, quiet, batches, **settings):
    """A fresh regressor + Adam under TrainMonitor + wrap; returns (train step, run log)."""
    net = make_regressor()
    monitor = TrainMonitor(str(log_dir), stream=quiet, **{**SPIKES, **settings})
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()),
                        nn.Adam(net.trainable_params(), learning_rate=0.01))
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    ms.train.Model(step).train(1, data, callbacks=[monitor], dataset_sink_mode=False)
    return step, read_rank_log(str(log_dir / "rank_0.jsonl"))


def test_a_skipped_spike_leaves_the_weights_of_a_run_without_that_batch(tmp_path, quiet,
                                                                        graph_mode):
    # grad_explode out of reach: the loss limit alone must withhold the update.
    settings = dict(on_anomaly={"loss_spike": "skip"}, grad_explode=1e30)
    batches = _batches(24, poison=(15,))
    skipped, log = _train(tmp_path / "skip", quiet, batches, **settings)
    reference, clean = _train(tmp_path / "ref", quiet, batches[:14] + batches[15:], **settings)
    assert [s["step"] for s in log.steps if s["skipped"]] == [15]
    assert not any(s["skipped"] for s in clean.steps) and not clean.anomalies
    [spike] = [a for a in log.anomalies if a["anomaly"] == "loss_spike"]
    assert spike["step"] == 15 and spike["actions"] == ["skip"] and spike["report"]
    assert log.end["reason"] == "completed"
    got, expected = weights_of(skipped), weights_of(reference)
    assert got.keys() == expected.keys() and "global_step" in got    # moments, steps too
    for name in expected:
        assert np.array_equal(got[name], expected[name]), name
    assert int(got["global_step"][0]) == 23                           # 24 steps, 1 withheld


def test_skipping_escalates_after_max_skips(tmp_path, quiet, graph_mode):
    # From step 12 on every batch is poisoned: skipping cannot cure it.
    batches = _batches(30, poison=range(12, 31))
    _, log = _train(tmp_path, quiet, batches, on_anomaly="skip", max_skips=2)
    assert [s["step"] for s in log.steps if s["skipped"]] == [12, 13, 14]
    assert log.end["reason"] == "stopped" and log.steps[-1]["step"] == 14
    by_step = {}
    for anomaly in log.anomalies:
        by_step.setdefault(anomaly["step"], []).append(anomaly)
    assert {a["anomaly"] for a in by_step[12]} >= {"loss_spike"}
    assert all(a["actions"] == ["skip"] for a in by_step[12] + by_step[13])
    assert by_step[13], "a withheld step in the same episode is reported too"
    last = by_step[14]
    assert all(a["actions"] == ["skip", "checkpoint", "stop"] for a in last)
    assert "escalated to checkpoint_and_stop" in last[0]["message"]
    report = json.loads((tmp_path / "anomalies" / "step14_rank0.json").read_text())
    assert "max_skips=2" in report["message"]
    saved = ms.load_checkpoint(last[0]["checkpoint"])
    assert int(saved["global_step"].asnumpy()[0]) == 11         # the last good weights


def test_the_host_repeats_the_graphs_float32_loss_decision(tmp_path, quiet, graph_mode):
    # Adam with LR 0: the weights, hence the loss, stay put; the moments show an update.
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, on_anomaly="skip",
                           hardware_interval_s=None)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()),
                        nn.Adam(net.trainable_params(), learning_rate=0.0))
    x, y = (ms.Tensor(a) for a in regression_arrays(8))
    loss = read_outputs(step(x, y), wrapped_by=step).loss
    below = float(np.nextafter(np.float32(loss), np.float32(0)))
    for limit, applied in ((loss, True), (below, False), (float("inf"), True)):
        step.set_limits(loss=limit)
        before = weights_of(step)["global_step"][0]
        out = read_outputs(step(x, y), wrapped_by=step)
        assert out.loss == loss
        assert bool(weights_of(step)["global_step"][0] > before) is applied, limit
        assert out.skipped is not applied
    norm = out.grad_norm                                 # the same at every step here
    under = float(np.nextafter(np.float32(norm), np.float32(0)))
    for limit, applied in ((norm, True), (under, False)):
        step.set_limits(grad_norm=limit)
        before = weights_of(step)["global_step"][0]
        out = read_outputs(step(x, y), wrapped_by=step)
        assert out.grad_norm == norm and out.skipped is not applied
        assert bool(weights_of(step)["global_step"][0] > before) is applied, limit
    # stats: loss, grad norm, LR
    assert step.update_applied([float("nan"), 0.0, 0.0]) is False
    for loss_value in (float("inf"), -float("inf")):     # past every limit, even "none"
        assert step.update_applied([loss_value, 0.0, 0.0]) is False
    step.set_limits(grad_norm=0.1)                       # the norm limit, not exact in float32
    bound = np.float32(0.1)
    assert step.update_applied([1.0, float(bound), 0.0]) is True
    assert step.update_applied([1.0, float(np.nextafter(bound, np.float32(1))), 0.0]) is False
    step.set_limits(grad_norm=1e40)                      # beyond float32: grad_explode decides
    assert step.update_applied([1.0, 100.0, 0.0]) and not step.update_applied([1.0, 100.01, 0.0])
    step.set_limits(lr=1e-3)
    assert step.update_applied([1.0, 1.0, 1e-3]) is True
    assert not step.update_applied([1.0, 1.0, 1.01e-3]) and not step.update_applied([1, 1, -1e-9])


def test_without_wrap_skip_warns_and_says_so_once(tmp_path, quiet, graph_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, on_anomaly="skip", **SPIKES)
    batches = _batches(20, poison=(12, 16))
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    ms.train.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 1e-4)).train(
        1, data, callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    spikes = [a for a in log.anomalies if a["anomaly"] == "loss_spike"]
    assert spikes and all(a["actions"] == ["warn"] for a in spikes)
    said = [n for n in log.of_kind("notice") if "'skip' acts as 'warn'" in n["message"]]
    assert len(said) == 1 and log.end["reason"] == "completed"


class _LossPlusOffset(nn.Cell):
    """MSE plus a per-batch offset column's maximum: +Inf there makes the loss +Inf while
    the gradients (the MSE's) stay finite, as softmax cross-entropy does after a bad step."""

    def __init__(self, net):
        super().__init__()
        self.net, self.mse = net, nn.MSELoss()

    def construct(self, x, y, offset):
        return self.mse(self.net(x), y) + offset.max()


def test_a_lasting_inf_loss_with_finite_gradients_is_withheld_and_escalates(tmp_path, quiet,
                                                                             mode):
    x, y = regression_arrays(20 * BATCH, seed=3)
    offset = np.zeros((20 * BATCH, 1), np.float32)
    offset[9 * BATCH:] = np.inf                                # steps 10 on
    data = ds.NumpySlicesDataset({"x": x, "y": y, "o": offset}, shuffle=False).batch(BATCH)
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, on_anomaly="skip", max_skips=3,
                           **SPIKES)
    step = monitor.wrap(_LossPlusOffset(net), nn.Adam(net.trainable_params(), 0.01))
    ms.train.Model(step).train(1, data, callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [s["step"] for s in log.steps if s["skipped"]] == [10, 11, 12, 13]
    assert all(np.isfinite(s["grad_norm"]) for s in log.steps)      # the gradients were fine
    nonfinite = [a for a in log.anomalies if a["anomaly"] == "loss_nonfinite"]
    assert [a["actions"] for a in nonfinite] == [["skip"]] * 3 + [["skip", "checkpoint", "stop"]]
    assert log.end["reason"] == "stopped" and log.end["steps"] == 13
    saved = ms.load_checkpoint(nonfinite[-1]["checkpoint"])
    assert int(saved["global_step"].asnumpy()[0]) == 9                # the last good weights
