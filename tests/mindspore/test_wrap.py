"""monitor.wrap: the in-graph global gradient norm, clipping and withheld updates."""
import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.reading.outputs import read_outputs
from ms_helpers import make_regressor, regression_arrays, weights_of


class Mixed(nn.Cell):
    """Gradients of both kinds: a 3-D weight of 65,536 elements, summed on its own with rows
    over its first axis, and small ones, concatenated and summed together."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Dense(4, 64)
        mix = np.random.default_rng(0).standard_normal((64, 32, 32)).astype(np.float32) * 0.05
        self.mix = ms.Parameter(ms.Tensor(mix), name="mix")
        self.out = nn.Dense(32, 1)

    def construct(self, x):
        hidden = ops.matmul(ops.tanh(self.inp(x)), ops.reshape(self.mix, (64, -1)))
        return self.out(ops.reshape(hidden, (-1, 32, 32)).mean(1))


def make_mixed(seed=0):
    ms.set_seed(seed)
    return Mixed()


NETS = {"regressor": make_regressor, "mixed": make_mixed}


def _reference_norm(initial, x, y, make_net=make_regressor):
    """The global L2 norm from mindspore.value_and_grad on a fresh cell, in PyNative mode."""
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        net = make_net()
        for param in net.get_parameters():
            param.set_data(ms.Tensor(initial[param.name]))
        loss_net = nn.WithLossCell(net, nn.MSELoss())
        grad_fn = ms.value_and_grad(loss_net, None, net.trainable_params())
        _, grads = grad_fn(ms.Tensor(x), ms.Tensor(y))
        return float(np.sqrt(sum(np.sum(g.asnumpy().astype(np.float64) ** 2) for g in grads)))
    finally:
        ms.set_context(mode=previous)


def _wrapped(tmp_path, quiet, optimizer_cls=nn.Adam, lr=0.01, make_net=make_regressor,
             **wrap_options):
    net = make_net()
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    optimizer = optimizer_cls(net.trainable_params(), learning_rate=lr)
    return net, optimizer, monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer,
                                        **wrap_options)


@pytest.mark.parametrize("net_name", list(NETS))
def test_global_norm_matches_value_and_grad(tmp_path, quiet, mode, net_name):
    net, _, step = _wrapped(tmp_path, quiet, make_net=NETS[net_name])
    assert len(step.summed_alone) == (1 if net_name == "mixed" else 0)
    for seed in range(3):                          # several steps: weights move in between
        x, y = regression_arrays(8, seed=seed)
        initial = weights_of(net)
        outputs = step(ms.Tensor(x), ms.Tensor(y))
        reference = _reference_norm(initial, x, y, NETS[net_name])
        out = read_outputs(outputs, wrapped_by=step)
        assert abs(out.grad_norm - reference) / reference < 1e-5, (mode, seed, out, reference)
        assert out.grads_finite is True and out.skipped is False


def test_clipping_happens_after_measuring(tmp_path, quiet, mode):
    net, _, step = _wrapped(tmp_path, quiet, optimizer_cls=nn.SGD, lr=0.1, clip_grad_norm=0.01)
    x, y = regression_arrays(8)
    before = weights_of(net)
    outputs = step(ms.Tensor(x), ms.Tensor(y))
    norm = read_outputs(outputs, wrapped_by=step).grad_norm
    assert norm > 0.01                              # the reported norm is the pre-clip one
    moved = np.sqrt(sum(np.sum((weights_of(net)[k] - before[k]).astype(np.float64) ** 2)
                        for k in before))
    # SGD moves the weights by lr * clipped norm.
    assert moved == pytest.approx(0.1 * 0.01, rel=1e-4)


@pytest.mark.parametrize("poison", ["nan", "huge"])
def test_anomalous_update_is_withheld_bit_for_bit(tmp_path, quiet, mode, poison):
    net, _optimizer, step = _wrapped(tmp_path, quiet)
    x, y = regression_arrays(8)
    step(ms.Tensor(x), ms.Tensor(y))                # one healthy step first
    before = weights_of(step)                       # weights, Adam moments, global_step
    bad_x, bad_y = x.copy(), y.copy()
    if poison == "nan":
        bad_x[0, 0] = np.nan
    else:
        bad_y[0, 0] = 1e6          # a finite but exploding gradient
    outputs = step(ms.Tensor(bad_x), ms.Tensor(bad_y))
    out = read_outputs(outputs, wrapped_by=step)
    assert out.skipped is True
    assert out.grads_finite is (poison == "huge")
    after = weights_of(step)
    assert before.keys() == after.keys()
    for name in before:
        assert np.array_equal(before[name], after[name]), name
    step(ms.Tensor(x), ms.Tensor(y))                # and training goes on afterwards
    assert not np.array_equal(before["inp.weight"], weights_of(net)["inp.weight"])


def test_without_skipping_the_bad_update_is_applied(tmp_path, quiet, graph_mode):
    net, _, step = _wrapped(tmp_path, quiet, skip_anomalous_updates=False)
    x, y = regression_arrays(8)
    y[0, 0] = 1e6
    before = weights_of(net)
    outputs = step(ms.Tensor(x), ms.Tensor(y))
    out = read_outputs(outputs, wrapped_by=step)
    assert out.grad_norm > 100 and out.skipped is False
    assert not np.array_equal(before["inp.weight"], weights_of(net)["inp.weight"])


@pytest.mark.parametrize("kwargs, error, match", [
    ({"clip_grad_norm": 0.0}, ValueError, "clip_grad_norm"),
    ({"clip_grad_norm": "1"}, TypeError, "clip_grad_norm"),
    ({"skip_anomalous_updates": 1}, TypeError, "skip_anomalous_updates"),
])
def test_wrap_rejects_bad_options(tmp_path, quiet, kwargs, error, match):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    with pytest.raises(error, match=match):
        monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()), **kwargs)


def test_wrap_rejects_wrong_types(tmp_path, quiet):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    with pytest.raises(TypeError, match=r"optimizer must be a mindspore\.nn\.Optimizer"):
        monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), "adam")
    with pytest.raises(TypeError, match=r"net_with_loss must be a mindspore\.nn\.Cell"):
        monitor.wrap(lambda x: x, nn.Adam(net.trainable_params()))


def test_an_lr_changed_between_steps_is_reported_and_applied(tmp_path, quiet, graph_mode):
    # A Parameter that only the optimizer's branch reads would miss set_data in GRAPH_MODE;
    # the wrap reads the LR outside the branch so both the record and the update see it.
    net, optimizer, step = _wrapped(tmp_path, quiet, optimizer_cls=nn.SGD, lr=0.1)
    x, y = regression_arrays(8)
    step(ms.Tensor(x), ms.Tensor(y))
    optimizer.learning_rate.set_data(ms.Tensor(0.02, ms.float32))
    before = weights_of(net)
    out = read_outputs(step(ms.Tensor(x), ms.Tensor(y)), wrapped_by=step)
    assert out.lr_groups == [pytest.approx(0.02)]
    moved = np.sqrt(sum(np.sum((weights_of(net)[k] - before[k]).astype(np.float64) ** 2)
                        for k in before))
    assert moved == pytest.approx(0.02 * out.grad_norm, rel=1e-4)


def test_the_host_repeats_the_graphs_float32_decision(tmp_path, quiet):
    monitor = TrainMonitor(str(tmp_path), stream=quiet, grad_explode=0.1)   # not exact in float32
    net = make_regressor()
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    bound = np.float32(0.1)

    def applied(norm, loss=1.0, lr=1e-3):               # the stats vector: loss, norm, LR
        return step.update_applied([loss, norm, lr])

    assert applied(float(bound)) is True                   # the graph compares with <=
    assert applied(float(np.nextafter(bound, np.float32(1)))) is False
    assert not applied(float("nan")) and not applied(float("inf"))
    # a non-finite loss or LR, or a negative LR, withholds the update whatever the policies
    assert not applied(0.01, loss=float("inf")) and not applied(0.01, loss=float("nan"))
    assert not applied(0.01, lr=float("inf")) and not applied(0.01, lr=-1e-3)
    keep = TrainMonitor(str(tmp_path / "keep"), stream=quiet, grad_explode=0.1).wrap(
        nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()),
        skip_anomalous_updates=False)
    assert keep.update_applied([float("nan")] * 3) is True


def test_a_checkpoint_loaded_between_steps_is_trained_on(tmp_path, quiet, graph_mode):
    # Rewinding in-process after an anomaly: load_param_into_net replaces the Parameters'
    # data. Adam's moments are read only by the optimizer inside the skip branch; unless the
    # wrap also loads them outside it, the graph would keep updating a detached copy.
    _net, _, step = _wrapped(tmp_path, quiet)
    x, y = (ms.Tensor(a) for a in regression_arrays(8))
    for _ in range(2):
        step(x, y)
    saved = str(tmp_path / "good.ckpt")
    ms.save_checkpoint(step, saved)
    for _ in range(3):
        step(x, y)
    ms.load_param_into_net(step, ms.load_checkpoint(saved))
    step(x, y)
    rewound = weights_of(step)

    _, _, fresh = _wrapped(tmp_path / "fresh", quiet)    # compiled after the load
    ms.load_param_into_net(fresh, ms.load_checkpoint(saved))
    fresh(x, y)
    expected = weights_of(fresh)
    assert rewound.keys() == expected.keys()
    for name in expected:
        assert np.array_equal(rewound[name], expected[name]), name
