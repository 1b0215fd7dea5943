"""on_anomaly "rewind": the training state goes back to a healthy snapshot, then on."""
import json
import time

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn
from mindspore.train import Callback

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, weights_of

BATCH = 8
# Short spike windows keep the runs short; grad_explode out of reach, so that the spike rule
# alone decides (its default policy would stop the run).
SETTINGS = dict(spike_window=16, spike_warmup=8, hardware_interval_s=None, grad_explode=1e30,
                on_anomaly={"loss_spike": "rewind"})


def _batches(n, poison=()):
    """``n`` batches; those in ``poison`` (1-based) have their targets scaled by 1e3."""
    x, y = regression_arrays(n * BATCH, seed=3)
    for index in poison:
        y[(index - 1) * BATCH: index * BATCH] *= 1e3
    return x, y


class WeightsAt(Callback):
    """Copies every Parameter of the train cell at the end of the given steps (after the
    monitor, which comes before it in the callback list, has acted)."""

    def __init__(self, cell, steps):
        self.cell, self.steps, self.seen = cell, set(steps), {}

    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num
        if step in self.steps:
            self.seen[step] = weights_of(self.cell)


def _train(log_dir, quiet, arrays, *, watch_steps=(), sgd=False, before=(), **settings):
    net = make_regressor()
    monitor = TrainMonitor(str(log_dir), stream=quiet, **{**SETTINGS, **settings})
    optimizer = (nn.Momentum(net.trainable_params(), learning_rate=1e-3, momentum=0.9) if sgd
                 else nn.Adam(net.trainable_params(), learning_rate=0.01))
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    watch = WeightsAt(step, watch_steps)
    data = ds.NumpySlicesDataset({"x": arrays[0], "y": arrays[1]}, shuffle=False).batch(BATCH)
    ms.train.Model(step).train(1, data, callbacks=[*before, monitor, watch],
                               dataset_sink_mode=False)
    return watch.seen, read_rank_log(str(log_dir / "rank_0.jsonl"))


def test_a_rewind_restores_the_snapshot_bit_for_bit(tmp_path, quiet, graph_mode):
    seen, log = _train(tmp_path, quiet, _batches(32, poison=(25,)), snapshot_every=10,
                       watch_steps=(20, 25))
    [rewind] = log.of_kind("rewind")
    assert (rewind["step"], rewind["to_step"], rewind["anomaly"], rewind["rewinds"]) == \
        (25, 20, "loss_spike", 1)
    [spike] = [a for a in log.anomalies if a["anomaly"] == "loss_spike"]
    assert spike["step"] == 25 and spike["actions"] == ["rewind"]
    assert "training state of step 20 was restored" in spike["message"]
    report = json.loads((tmp_path / "anomalies" / "step25_rank0.json").read_text())
    assert "restored" in report["message"]
    snapshot, after = seen[20], seen[25]
    assert snapshot.keys() == after.keys() and "global_step" in after   # optimizer state too
    assert int(after["global_step"][0]) == 20
    for name in snapshot:
        assert np.array_equal(snapshot[name], after[name]), name
    assert log.end["reason"] == "completed" and log.steps[-1]["step"] == 32
    # The LR went back with the optimizer's step: the step after the rewind ran at step 21's.
    by_step = {s["step"]: s for s in log.steps}
    assert by_step[26]["lr"] == by_step[21]["lr"]


def test_a_poisoned_batch_is_forgotten_and_the_loss_returns(tmp_path, quiet, graph_mode):
    # Momentum SGD: unlike Adam it does not normalise the poisoned gradient away.
    arrays = _batches(40, poison=(25,))
    _, rewound = _train(tmp_path / "rewind", quiet, arrays, snapshot_every=10, sgd=True)
    _, warned = _train(tmp_path / "warn", quiet, arrays, on_anomaly="warn", sgd=True)
    loss = {s["step"]: s["loss"] for s in rewound.steps}
    before = np.mean([loss[s] for s in range(20, 25)])
    after = np.mean([loss[s] for s in range(30, 41)])
    harmed = np.mean([s["loss"] for s in warned.steps if 30 <= s["step"] <= 40])
    assert after < 1.2 * before, (before, after)
    assert harmed > 2 * after, (harmed, after)        # what warn left trained in
    assert {a["step"] for a in rewound.anomalies} == {25}        # no relapse, no false alarm
    assert [(r["step"], r["to_step"]) for r in rewound.of_kind("rewind")] == [(25, 20)]


def test_a_fault_that_keeps_coming_back_stops_after_max_rewinds(tmp_path, quiet, graph_mode):
    # From step 22 on every batch is poisoned: going back cannot cure it.
    _, log = _train(tmp_path, quiet, _batches(40, poison=range(22, 41)), snapshot_every=5,
                    max_rewinds=2)
    rewinds = log.of_kind("rewind")
    assert [(r["step"], r["to_step"], r["rewinds"]) for r in rewinds] == [(22, 20, 1),
                                                                          (23, 20, 2)]
    spikes = [a for a in log.anomalies if a["anomaly"] == "loss_spike"]
    assert [a["actions"] for a in spikes] == [["rewind"], ["rewind"],
                                              ["checkpoint", "stop"]]
    assert "max_rewinds=2" in spikes[-1]["message"]
    assert log.end["reason"] == "stopped" and log.steps[-1]["step"] == 24
    saved = ms.load_checkpoint(spikes[-1]["checkpoint"])
    assert int(saved["global_step"].asnumpy()[0]) == 21      # snapshot 20, then step 24


def test_without_wrap_the_model_s_own_train_cell_is_rewound(tmp_path, quiet, graph_mode):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet, snapshot_every=10, **SETTINGS)
    model = ms.train.Model(net, nn.MSELoss(), nn.Adam(net.trainable_params(), 0.01))
    x, y = _batches(32, poison=(25,))
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    watch = WeightsOfModel((20, 25))
    model.train(1, data, callbacks=[monitor, watch], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [(r["step"], r["to_step"]) for r in log.of_kind("rewind")] == [(25, 20)]
    snapshot, after = watch.seen[20], watch.seen[25]
    assert int(after["global_step"][0]) == 20
    for name in snapshot:
        assert np.array_equal(snapshot[name], after[name]), name


class WeightsOfModel(WeightsAt):
    """WeightsAt for the train cell Model built itself (known only once training runs)."""

    def __init__(self, steps):
        super().__init__(None, steps)

    def on_train_step_end(self, run_context):
        self.cell = run_context.original_args().train_network
        super().on_train_step_end(run_context)


def test_rewind_is_refused_for_kinds_an_older_state_cannot_cure(tmp_path):
    import pytest
    with pytest.raises(ValueError, match="overheat"):
        TrainMonitor(str(tmp_path), on_anomaly={"overheat": "rewind"})


class SteadyCompute(Callback):
    """20 ms inside every step: a device's steady pace, which a loaded CI host's contention
    does not double (the regressor's own 1 ms step it does)."""

    def on_train_step_end(self, run_context):
        time.sleep(0.02)


def test_rewinds_are_no_throughput_drop(tmp_path, quiet, graph_mode):
    """Each rewind restores the snapshot before the next step (a slow step); with the pace
    rules watching short windows, only the spikes are anomalies."""
    # (the host sampled, so that a drop the host's other processes made says so)
    _, log = _train(tmp_path, quiet, _batches(80, poison=(35, 55)), snapshot_every=10,
                    trend_warmup=5, pace_window=8, before=[SteadyCompute()],
                    hardware_interval_s=0.5)
    assert [r["step"] for r in log.of_kind("rewind")][:2] == [35, 55]
    kinds = {a["anomaly"] for a in log.anomalies}
    assert "loss_spike" in kinds and "data_bound" not in kinds
    # (a test worker shares the host: a drop that its other processes explain is no rewind's)
    assert all(a["cause"] == "host" for a in log.anomalies
               if a["anomaly"] == "throughput_drop"), [a["message"] for a in log.anomalies]
