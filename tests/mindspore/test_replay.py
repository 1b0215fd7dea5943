"""replay: a withheld step computed again on the same batch and weights before the next step.
A one-shot fault (a Cell that corrupts its output once and disarms itself inside the graph)
comes out healthy the second time: transient_fault. A poisoned batch fails bit-identically:
the anomaly names the batch. Healthy steps are never replayed."""
import math

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn, ops
from mindspore.train import Callback, Model

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, regression_dataset

STEPS, BATCH, FAULT = 6, 8, 3



class FlakyOnce(nn.Cell):
    """The model's output divided by (1 - armed): +inf once armed, and the graph disarms it
    in the same forward, so the same step computed again is healthy."""

    def __init__(self, model):
        super().__init__(auto_prefix=False)
        self.model = model
        self.armed = ms.Parameter(ms.Tensor(0.0, ms.float32), name="flaky_armed",
                                  requires_grad=False)

    def construct(self, x):
        out = self.model(x) / (1.0 - self.armed)
        return ops.depend(out, ops.assign(self.armed, ops.zeros((), ms.float32)))


class ArmAt(Callback):
    def __init__(self, flaky, step):
        self.flaky, self.step = flaky, step

    def on_train_step_begin(self, run_context):
        if run_context.original_args().cur_step_num == self.step:
            ops.assign(self.flaky.armed, ms.Tensor(1.0, ms.float32))


def _train(tmp_path, net, data, callbacks=(), **settings):
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), hardware_interval_s=None, **settings)
    Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer)).train(
        1, data, callbacks=[*callbacks, monitor], dataset_sink_mode=False)
    return read_rank_log(str(tmp_path / "rank_0.jsonl"))


WARN_NONFINITE = {"loss_nonfinite": "warn", "gradient_nonfinite": "warn"}


def test_a_one_shot_fault_is_a_transient_fault_and_training_goes_on(tmp_path, mode):
    flaky = FlakyOnce(make_regressor())
    log = _train(tmp_path / "fault", flaky, regression_dataset(n=STEPS * BATCH),
                 [ArmAt(flaky, FAULT)], on_anomaly=WARN_NONFINITE)
    assert [s["step"] for s in log.steps if s["skipped"]] == [FAULT]
    [replay] = log.of_kind("replay")
    assert (replay["step"], replay["anomaly"], replay["reproduced"], replay["healthy"]) == (
        FAULT, "loss_nonfinite", False, True)
    assert replay["loss"] == math.inf and math.isnan(replay["grad_norm"])
    # the replay computed what the same step computes in a run without the fault, exactly
    healthy = _train(tmp_path / "healthy", FlakyOnce(make_regressor()),
                     regression_dataset(n=STEPS * BATCH))
    same_step = {s["step"]: s for s in healthy.steps}[FAULT]
    assert (replay["replay_loss"], replay["replay_grad_norm"]) == (
        same_step["loss"], same_step["grad_norm"])
    kinds = [(a["step"], a["anomaly"]) for a in log.anomalies]
    assert kinds == [(FAULT, "loss_nonfinite"), (FAULT, "gradient_nonfinite"),
                     (FAULT, "transient_fault")]
    transient = log.anomalies[-1]
    assert transient["actions"] == ["warn"] and "rank 0 (host " in transient["message"]
    assert "came out healthy" in log.anomalies[0]["replay_verdict"]
    assert [a.get("replay_verdict") for a in log.anomalies[1:]] == [
        log.anomalies[0]["replay_verdict"], None]        # the step's verdict; not the fault's
    assert log.end["reason"] == "completed" and len(log.steps) == STEPS
    # the update stayed withheld: from the fault on the runs differ by that one update
    assert {s["step"]: s["loss"] for s in log.steps}[FAULT + 1] != {
        s["step"]: s["loss"] for s in healthy.steps}[FAULT + 1]


def test_a_poisoned_batch_fails_again_bit_identically_and_is_named(tmp_path, mode):
    log = _train(tmp_path, make_regressor(),
                 regression_dataset(n=STEPS * BATCH, nan_at=FAULT), on_anomaly="warn")
    [replay] = log.of_kind("replay")
    assert (replay["step"], replay["reproduced"], replay["healthy"]) == (FAULT, True, False)
    assert math.isnan(replay["replay_loss"]) and math.isnan(replay["loss"])
    assert "transient_fault" not in [a["anomaly"] for a in log.anomalies]
    first = log.anomalies[0]
    assert (f"bit-identical: the batch (step {FAULT} of epoch 1) or the model's state is "
            "the cause") in first["replay_verdict"]


def test_the_report_of_a_stopping_anomaly_says_what_the_replay_found(tmp_path):
    log = _train(tmp_path, make_regressor(), regression_dataset(n=STEPS * BATCH, nan_at=FAULT))
    first = log.anomalies[0]
    assert first["actions"] == ["checkpoint", "stop"]
    report = (tmp_path / first["report"]).with_suffix(".md").read_text()
    assert f"the batch (step {FAULT} of epoch 1)" in report


class PoisonedEachEpoch:
    """The regression rows with the third batch poisoned in every epoch, with other NaNs each
    time: the same batch twice would be a known bad one the second time, withheld without a
    replay (issue #46, test_bad_batches_ms.py)."""

    def __init__(self, n):
        self.n, self.epochs = n, 0

    def __iter__(self):
        self.epochs += 1
        x, y = regression_arrays(self.n)
        x[2 * BATCH:3 * BATCH:self.epochs] = np.nan
        return iter(list(zip(x, y, strict=True)))


def test_model_fit_names_the_batch_in_its_epoch(tmp_path):
    """The third batch is poisoned in every epoch (steps 3 and 7), with a validation set."""
    net, loss = make_regressor(), nn.MSELoss()
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), hardware_interval_s=None, on_anomaly="warn")
    model = Model(monitor.wrap(nn.WithLossCell(net, loss), optimizer),
                  eval_network=nn.WithEvalCell(net, loss), metrics={"mae"},
                  eval_indexes=[0, 1, 2])
    data = ds.GeneratorDataset(PoisonedEachEpoch(4 * BATCH), ["x", "y"], shuffle=False,
                               python_multiprocessing=False).batch(BATCH)
    model.fit(2, data, regression_dataset(n=16, seed=1), callbacks=[monitor],
              dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    replays = log.of_kind("replay")
    assert [r["step"] for r in replays] == [3, 7] and all(r["reproduced"] for r in replays)
    verdicts = [a["replay_verdict"] for a in log.anomalies if a["anomaly"] == "loss_nonfinite"]
    assert "the batch (step 3 of epoch 1)" in verdicts[0]
    assert "the batch (step 3 of epoch 2)" in verdicts[1]


def test_healthy_steps_are_never_replayed_and_replay_can_be_off(tmp_path):
    log = _train(tmp_path / "a", make_regressor(), regression_dataset(n=STEPS * BATCH))
    assert log.of_kind("replay") == [] and log.anomalies == []
    off = _train(tmp_path / "b", make_regressor(),
                 regression_dataset(n=STEPS * BATCH, nan_at=FAULT), on_anomaly="warn",
                 replay=False)
    assert off.of_kind("replay") == [] and "computed again" not in off.anomalies[0]["message"]
    assert "replay_verdict" not in off.anomalies[0]


def test_the_functional_loop(tmp_path, pynative_mode):     # the tutorials' @ms.jit style
    flaky, loss_fn = FlakyOnce(make_regressor()), nn.MSELoss()
    optimizer = nn.Adam(flaky.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), hardware_interval_s=None,
                           on_anomaly=WARN_NONFINITE)

    def forward_fn(x, y):
        return loss_fn(flaky(x), y)

    step = monitor.jit_step(forward_fn, optimizer)
    x, y = regression_arrays(STEPS * BATCH)
    for n in range(1, STEPS + 1):
        if n == FAULT:
            ops.assign(flaky.armed, ms.Tensor(1.0, ms.float32))
        batch = x[(n - 1) * BATCH:n * BATCH], y[(n - 1) * BATCH:n * BATCH]
        monitor.observe(step=n, outputs=step(*(ms.Tensor(a) for a in batch)))
    monitor.close()
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [(a["step"], a["anomaly"]) for a in log.anomalies] == [
        (FAULT, "loss_nonfinite"), (FAULT, "gradient_nonfinite"), (FAULT, "transient_fault")]
    [replay] = log.of_kind("replay")
    assert replay["healthy"] is True and math.isfinite(replay["replay_grad_norm"])
