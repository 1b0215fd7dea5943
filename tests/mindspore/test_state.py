"""State records (state_interval): every field against values computed independently, from
the parameters before and after the step (host copies, test-only) and from gradients taken
in PYNATIVE mode on a fresh Cell, on every path users train by."""
import math

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback, Model

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, regression_dataset

INTERVAL, STEPS, BATCH = 2, 6, 8
REL = 1e-5



def _optimizer(kind, params):
    if kind == "adamw":
        return nn.AdamWeightDecay(params, 1e-2, weight_decay=0.01)
    if kind == "adam":
        return nn.Adam(params, 1e-2)
    if kind == "momentum":
        return nn.Momentum(params, 1e-2, 0.9)
    return nn.SGD(params, 1e-2)


def _copies(parameters):
    return {p.name: p.asnumpy().astype(np.float64) for p in parameters}


class Recorder(Callback):
    """Before and after each step: the weights, the moments, the batch (test-only copies)."""

    def __init__(self, optimizer, first, second):
        self.optimizer, self.first, self.second = optimizer, first, second
        self.steps = {}

    def on_train_step_begin(self, run_context):
        self.before = _copies(self.optimizer.parameters)

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        self.steps[int(cb.cur_step_num)] = record(
            self.optimizer, self.before, [t.asnumpy() for t in cb.train_dataset_element],
            self.first, self.second)


def record(optimizer, before, batch, first, second):
    moments = {}
    for key, prefix in (("m", first), ("v", second)):
        if prefix is not None:
            moments[key] = {name[len(prefix) + 1:]: value for name, value in _copies(
                p for p in optimizer.get_parameters() if p.name.startswith(prefix + ".")).items()}
    return {"before": before, "after": _copies(optimizer.parameters), "batch": batch,
            **moments}


def reference_grads(weights, batch):
    """The step's gradients, in PYNATIVE mode on a fresh Cell holding the weights before
    the step (GRAPH mode's value_and_grad over a reused Cell may read stale weights)."""
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        net = nn.WithLossCell(make_regressor(), nn.MSELoss())
        params = net.trainable_params()
        ms.load_param_into_net(net, {name: ms.Parameter(ms.Tensor(value.astype(np.float32)),
                                                        name=name)
                                     for name, value in weights.items()})
        grads = ms.grad(net, None, params)(*(ms.Tensor(a) for a in batch))
        return {p.name: g.asnumpy().astype(np.float64) for p, g in zip(params, grads, strict=True)}
    finally:
        ms.set_context(mode=previous)


def _layer(name):
    return name.rsplit(".", 1)[0]


def _norms(arrays):
    layers = {}
    for name, array in arrays.items():
        layers[_layer(name)] = layers.get(_layer(name), 0.0) + float((array ** 2).sum())
    return {layer: math.sqrt(total) for layer, total in layers.items()}


def check_state(state, seen):
    """Every field of one state record against ``seen`` (the Recorder's entry)."""
    after, before = seen["after"], seen["before"]
    update = {name: after[name] - before[name] for name in after}
    expected = {"weight_norm": _norms(after), "update_norm": _norms(update),
                "grad_norm": _norms(reference_grads(before, seen["batch"]))}
    for key in ("m", "v"):
        if key in seen:
            expected[f"{key}_norm"] = _norms(seen[key])
    layers = state["layers"]
    assert sorted(layers) == sorted(expected["weight_norm"]) == ["inp", "norm", "out"]
    for layer, fields in layers.items():
        assert sorted(fields) == sorted([*expected, "update_ratio"]), layer
        for quantity, norms in expected.items():
            assert fields[quantity] == pytest.approx(norms[layer], rel=REL), (layer, quantity)
        assert fields["update_ratio"] == pytest.approx(
            expected["update_norm"][layer] / expected["weight_norm"][layer], rel=REL)
    total = math.sqrt(sum(float((a ** 2).sum()) for a in after.values()))
    moved = math.sqrt(sum(float((a ** 2).sum()) for a in update.values()))
    assert state["weight_norm"] == pytest.approx(total, rel=REL)
    assert state["update_norm"] == pytest.approx(moved, rel=REL)


MOMENTS = {"adamw": ("adam_m", "adam_v"), "adam": ("moment1", "moment2"),
           "momentum": ("moments", None), "sgd": (None, None)}


@pytest.mark.parametrize("kind", ["adamw", "adam", "momentum", "sgd"])
def test_model_train_state_records_hold_every_field_exactly(tmp_path, mode, kind):
    net = nn.WithLossCell(make_regressor(), nn.MSELoss())
    optimizer = _optimizer(kind, net.trainable_params())
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None)
    recorder = Recorder(optimizer, *MOMENTS[kind])
    Model(monitor.wrap(net, optimizer, clip_grad_norm=0.5)).train(
        1, regression_dataset(n=STEPS * BATCH), callbacks=[recorder, monitor],
        dataset_sink_mode=False)
    states = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("state")
    assert [s["step"] for s in states] == [2, 4, 6]
    for state in states:
        check_state(state, recorder.steps[state["step"]])


def test_model_fit_with_a_validation_set(tmp_path):
    net = make_regressor()
    loss = nn.MSELoss()
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None)
    recorder = Recorder(optimizer, "moment1", "moment2")
    model = Model(monitor.wrap(nn.WithLossCell(net, loss), optimizer),
                  eval_network=nn.WithEvalCell(net, loss), metrics={"mae"},
                  eval_indexes=[0, 1, 2])
    model.fit(2, regression_dataset(n=4 * BATCH), regression_dataset(n=16, seed=1),
              callbacks=[recorder, monitor], dataset_sink_mode=False)
    states = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("state")
    assert [s["step"] for s in states] == [2, 4, 6, 8]           # epoch 2 counts on
    for state in states:
        check_state(state, recorder.steps[state["step"]])


def test_the_functional_loop(tmp_path, pynative_mode):     # the tutorials' @ms.jit style
    net, loss_fn = make_regressor(), nn.MSELoss()
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL,
                           hardware_interval_s=None)

    def forward_fn(x, y):
        return loss_fn(net(x), y)

    step = monitor.jit_step(forward_fn, optimizer)
    x, y = regression_arrays(STEPS * BATCH)
    seen = {}
    for n in range(1, STEPS + 1):
        batch = [x[(n - 1) * BATCH:n * BATCH], y[(n - 1) * BATCH:n * BATCH]]
        before = _copies(optimizer.parameters)
        outputs = step(*(ms.Tensor(a) for a in batch))
        seen[n] = record(optimizer, before, batch, "moment1", "moment2")
        monitor.observe(step=n, outputs=outputs)
    monitor.close()
    states = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("state")
    assert [s["step"] for s in states] == [2, 4, 6]
    for state in states:
        check_state(state, seen[state["step"]])


def test_a_withheld_update_is_an_update_of_zero(tmp_path):
    net = nn.WithLossCell(make_regressor(), nn.MSELoss())
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None,
                           on_anomaly="warn")
    recorder = Recorder(optimizer, "moment1", "moment2")
    Model(monitor.wrap(net, optimizer)).train(
        1, regression_dataset(n=STEPS * BATCH, nan_at=4), callbacks=[recorder, monitor],
        dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [s["step"] for s in log.steps if s["skipped"]] == [4]
    state = {s["step"]: s for s in log.of_kind("state")}[4]
    assert state["update_norm"] == 0.0
    assert all(layer["update_norm"] == 0.0 and layer["update_ratio"] == 0.0
               and math.isnan(layer["grad_norm"]) for layer in state["layers"].values())
    assert state["weight_norm"] == pytest.approx(math.sqrt(sum(
        float((a ** 2).sum()) for a in recorder.steps[4]["after"].values())), rel=REL)


def test_off_the_state_graph_is_never_built(tmp_path):
    net = nn.WithLossCell(make_regressor(), nn.MSELoss())
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), state_interval=None, hardware_interval_s=None)
    train_step = monitor.wrap(net, optimizer)
    Model(train_step).train(1, regression_dataset(n=4 * BATCH), callbacks=[monitor],
                            dataset_sink_mode=False)
    assert read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("state") == []
    assert train_step._state_variant is None


def test_one_layer_groups_lr_raised_50x_is_an_update_ratio_anomaly_naming_it(tmp_path):
    net = make_regressor()
    out = [p for p in net.trainable_params() if p.name.startswith("out.")]
    rest = [p for p in net.trainable_params() if not p.name.startswith("out.")]
    steps = 16
    optimizer = nn.Adam([{"params": rest, "lr": [1e-3] * steps},
                         {"params": out, "lr": [1e-3] * 10 + [5e-2] * (steps - 10)}], 1e-3)
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None,
                           on_anomaly={"lr_anomaly": "warn"})
    Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer)).train(
        1, regression_dataset(n=steps * BATCH), callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    [found] = [a for a in log.anomalies if a["anomaly"] == "update_ratio"]
    assert found["step"] == 12 and found["message"].startswith("layer out:")   # step 11 on
    ratios = {s["step"]: s["layers"]["out"]["update_ratio"] for s in log.of_kind("state")}
    assert found["value"] == ratios[12] > 10 * ratios[10]


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_a_train_cell_of_its_own_gets_weight_and_moment_norms_measured_from_outside(
        tmp_path, kind):
    """nn.TrainOneStepCell, not wrap: the weights and the moments after the step, exactly;
    the update and the gradients are not known there, and are null."""
    net = nn.WithLossCell(make_regressor(), nn.MSELoss())
    optimizer = _optimizer(kind, net.trainable_params())
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None)
    recorder = Recorder(optimizer, *MOMENTS[kind])
    Model(nn.TrainOneStepCell(net, optimizer)).train(
        1, regression_dataset(n=STEPS * BATCH), callbacks=[recorder, monitor],
        dataset_sink_mode=False)
    states = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("state")
    assert [s["step"] for s in states] == [2, 4, 6]
    for state in states:
        seen = recorder.steps[state["step"]]
        expected = {"weight_norm": _norms(seen["after"])}
        expected.update({f"{key}_norm": _norms(seen[key]) for key in ("m", "v") if key in seen})
        assert state["update_norm"] is None
        for layer, fields in state["layers"].items():
            assert fields["update_norm"] is fields["update_ratio"] is fields["grad_norm"] is None
            assert sorted(fields) == sorted([*expected, "update_norm", "update_ratio",
                                             "grad_norm"])
            for quantity, norms in expected.items():
                assert fields[quantity] == pytest.approx(norms[layer], rel=REL), (layer, quantity)
