"""monitor.wrap: the in-graph global gradient norm, clipping and withheld updates."""
import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from ms_helpers import make_regressor, regression_arrays, weights_of
from mindwatch.mindspore import TrainMonitor


def _reference_norm(initial, x, y):
    """The global L2 norm from mindspore.value_and_grad on a fresh cell, in PyNative mode."""
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        net = make_regressor()
        for param in net.get_parameters():
            param.set_data(ms.Tensor(initial[param.name]))
        loss_net = nn.WithLossCell(net, nn.MSELoss())
        grad_fn = ms.value_and_grad(loss_net, None, net.trainable_params())
        _, grads = grad_fn(ms.Tensor(x), ms.Tensor(y))
        return float(np.sqrt(sum(np.sum(g.asnumpy().astype(np.float64) ** 2) for g in grads)))
    finally:
        ms.set_context(mode=previous)


def _wrapped(tmp_path, quiet, optimizer_cls=nn.Adam, lr=0.01, **wrap_options):
    net = make_regressor()
    monitor = TrainMonitor(str(tmp_path), stream=quiet)
    optimizer = optimizer_cls(net.trainable_params(), learning_rate=lr)
    return net, optimizer, monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer,
                                        **wrap_options)


def test_global_norm_matches_value_and_grad(tmp_path, quiet, mode):
    net, _, step = _wrapped(tmp_path, quiet)
    x, y = regression_arrays(8)
    for seed in range(3):                          # several steps: weights move in between
        x, y = regression_arrays(8, seed=seed)
        initial = weights_of(net)
        outputs = step(ms.Tensor(x), ms.Tensor(y))
        reference = _reference_norm(initial, x, y)
        _, norm, skipped, finite = outputs[1].asnumpy()[:4]
        assert abs(norm - reference) / reference < 1e-5, (mode, seed, norm, reference)
        assert finite == 1.0 and skipped == 0.0


def test_clipping_happens_after_measuring(tmp_path, quiet, mode):
    net, _, step = _wrapped(tmp_path, quiet, optimizer_cls=nn.SGD, lr=0.1, clip_grad_norm=0.01)
    x, y = regression_arrays(8)
    before = weights_of(net)
    outputs = step(ms.Tensor(x), ms.Tensor(y))
    norm = float(outputs[1].asnumpy()[1])
    assert norm > 0.01                              # the reported norm is the pre-clip one
    moved = np.sqrt(sum(np.sum((weights_of(net)[k] - before[k]).astype(np.float64) ** 2)
                        for k in before))
    # SGD moves the weights by lr * clipped norm.
    assert moved == pytest.approx(0.1 * 0.01, rel=1e-4)


@pytest.mark.parametrize("poison", ["nan", "huge"])
def test_anomalous_update_is_withheld_bit_for_bit(tmp_path, quiet, mode, poison):
    net, optimizer, step = _wrapped(tmp_path, quiet)
    x, y = regression_arrays(8)
    step(ms.Tensor(x), ms.Tensor(y))                # one healthy step first
    before = weights_of(step)                       # weights, Adam moments, global_step
    bad_x, bad_y = x.copy(), y.copy()
    if poison == "nan":
        bad_x[0, 0] = np.nan
    else:
        bad_y[0, 0] = 1e6          # a finite but exploding gradient
    outputs = step(ms.Tensor(bad_x), ms.Tensor(bad_y))
    _, _, skipped, finite = outputs[1].asnumpy()[:4]
    assert skipped == 1.0
    assert finite == (1.0 if poison == "huge" else 0.0)
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
    assert outputs[1].asnumpy()[2] == 0.0           # not skipped
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
    with pytest.raises(TypeError, match="optimizer must be a mindspore.nn.Optimizer"):
        monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), "adam")
    with pytest.raises(TypeError, match="net_with_loss must be a mindspore.nn.Cell"):
        monitor.wrap(lambda x: x, nn.Adam(net.trainable_params()))
