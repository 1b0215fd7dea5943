"""wrap(activations=..., attention_logits=...): chosen sub-Cells' outputs and the largest
attention logit on state steps, against references computed independently: PyNative forward
hooks on a fresh Cell holding the weights before the step, and the logits in NumPy from the
attention's inputs and projection weights (themselves checked against MindSpore's softmax)."""
import math

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops
from mindspore.train import Callback, Model

from mindwatch.mindspore import TrainMonitor
from mindwatch.runlog import read_rank_log

INTERVAL, STEPS, BATCH, T, D = 2, 6, 4, 5, 8
REL = 1e-5
WATCHED = ["inp", "enc.dense*"]


class AttnNet(nn.Cell):
    """An input projection, one nn.TransformerEncoderLayer under a causal mask, a head."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Dense(4, D)
        self.enc = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0, batch_first=True)
        self.out = nn.Dense(D, 1)
        self.mask = ms.Tensor(np.triu(np.ones((T, T), np.bool_), k=1))

    def construct(self, x):
        h = self.enc(self.inp(x), src_mask=self.mask)
        return self.out(h.mean(1))


def make_net(seed=0):
    ms.set_seed(seed)
    return AttnNet()


def arrays(n, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, T, 4).astype(np.float32) * 2.0
    return x, x.sum((1, 2)).reshape(n, 1).astype(np.float32) * 0.1


def dataset(n):
    import mindspore.dataset as ds
    x, y = arrays(n)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)



def _copies(parameters):
    return {p.name: p.asnumpy().copy() for p in parameters}    # asnumpy shares memory


def reference(weights, x):
    """Forward hooks in PyNative mode on a fresh AttnNet holding ``weights``: the watched
    outputs' max |x| and RMS, and the largest logit in NumPy from self_attn's inputs."""
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        net = make_net(seed=1)
        ms.load_param_into_net(net, {n: ms.Parameter(ms.Tensor(v), name=n)
                                     for n, v in weights.items()})
        seen = {}

        def keep(name):
            def hook(cell, inputs, output):
                seen[name] = (inputs, output)
            return hook
        for name, cell in [("inp", net.inp), ("enc.dense1", net.enc.dense1),
                           ("enc.dense2", net.enc.dense2), ("enc.self_attn", net.enc.self_attn)]:
            cell.register_forward_hook(keep(name))
        net(ms.Tensor(x))
        stats = {}
        for name in ("inp", "enc.dense1", "enc.dense2"):
            out = seen[name][1].asnumpy().astype(np.float64)
            stats[name] = {"max_abs": float(np.abs(out).max()),
                           "rms": float(np.sqrt((out ** 2).mean()))}
        query = seen["enc.self_attn"][0][0]
        logits = numpy_logits(weights, query.asnumpy().astype(np.float64))
        masked = np.where(np.triu(np.ones((T, T), bool), k=1), -np.inf, logits)
        _, probs = net.enc.self_attn(query, query, query, attn_mask=net.mask,
                                     need_weights=True, average_attn_weights=False)
        softmax = np.exp(masked - masked.max(-1, keepdims=True))
        np.testing.assert_allclose(softmax / softmax.sum(-1, keepdims=True), probs.asnumpy(),
                                   rtol=1e-4, atol=1e-6)    # the NumPy logits are MindSpore's
        stats["enc.self_attn"] = {"max_logit": float(masked.max())}
        return stats
    finally:
        ms.set_context(mode=previous)


def numpy_logits(weights, x):
    """(N, H, T, T) logits of enc.self_attn for input x (N, T, D), batch first."""
    w = weights["enc.self_attn.in_proj_weight"].astype(np.float64)
    b = weights["enc.self_attn.in_proj_bias"].astype(np.float64)
    q, k = x @ w[:D].T + b[:D], x @ w[D:2 * D].T + b[D:2 * D]
    heads = lambda a: a.reshape(a.shape[0], T, 2, D // 2).transpose(0, 2, 1, 3)  # noqa: E731
    return heads(q) @ heads(k).transpose(0, 1, 3, 2) / math.sqrt(D // 2)


class Recorder(Callback):
    """The weights and the batch of each step (test-only copies), and which probes had
    written their Parameters (``written``; see Zero)."""

    def __init__(self, net, probes):
        self.net, self.probes, self.steps, self.written = net, probes, {}, {}
        self.norms = {}

    def on_train_step_begin(self, run_context):
        self.before = _copies(self.net.get_parameters())

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        step = int(cb.cur_step_num)
        self.steps[step] = (self.before, cb.train_dataset_element[0].asnumpy())
        after = _copies(self.net.get_parameters())
        self.norms[step] = (_norm(after.values()),
                            _norm(after[name] - self.before[name] for name in after))
        self.written[step] = sorted(name for name, cell in self.probes().items()
                                    if cell.mindwatch_stats.asnumpy()[0] == 1.0)


def _norm(arrays):
    return math.sqrt(sum(float((a.astype(np.float64) ** 2).sum()) for a in arrays))


def check(states, seen):
    assert [s["step"] for s in states] == [2, 4, 6]
    for state in states:
        expected = reference(*seen[state["step"]])
        assert sorted(state["activations"]) == sorted(expected)
        for cell, fields in expected.items():
            assert sorted(state["activations"][cell]) == sorted(fields), cell
            for key, value in fields.items():
                assert state["activations"][cell][key] == pytest.approx(value, rel=REL), \
                    (state["step"], cell, key)


def _probes(train_step):
    return lambda: train_step.probes.cells


class Zero(Callback):
    """After the monitor: the probes' Parameters zeroed after every step, so that an ordinary
    step that wrote them would show in the Recorder's ``written``."""

    def __init__(self, train_step):
        self.train_step = train_step

    def on_train_step_end(self, run_context):
        for cell in self.train_step.probes.cells.values():
            ops.assign(cell.mindwatch_stats, ms.Tensor(np.zeros(4, np.float32)))


def test_model_train_measures_the_watched_outputs_and_the_largest_logit_on_state_steps(
        tmp_path, mode):
    net = make_net()
    names = [p.name for p in net.get_parameters()]
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer, activations=WATCHED,
                        attention_logits=["enc.self_attn"])
    recorder = Recorder(net, _probes(step))
    Model(step).train(1, dataset(STEPS * BATCH), callbacks=[recorder, monitor, Zero(step)],
                      dataset_sink_mode=False)
    states = read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("state")
    check(states, recorder.steps)
    # the ordinary steps measure nothing
    probed = ["enc.dense1", "enc.dense2", "enc.self_attn", "inp"]
    assert recorder.written == {1: [], 2: probed, 3: [], 4: probed, 5: [], 6: probed}
    # the probes' writes in the forward leave the weights' and the update's norms exact
    for state in states:
        assert (state["weight_norm"], state["update_norm"]) == pytest.approx(
            recorder.norms[state["step"]], rel=REL)
    # the same object, Parameters and names; the probes' own Parameters are off the tree
    assert isinstance(net.enc.self_attn, nn.MultiheadAttention)
    assert [p.name for p in net.get_parameters()] == names
    assert not any("activation" in name for name in step.parameters_dict())


def test_model_fit_with_a_validation_set(tmp_path):
    net = make_net()
    loss = nn.MSELoss()
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None)
    step = monitor.wrap(nn.WithLossCell(net, loss), optimizer, activations=WATCHED,
                        attention_logits=["enc.self_attn"])
    recorder = Recorder(net, _probes(step))
    model = Model(step, eval_network=nn.WithEvalCell(net, loss), metrics={"mae"},
                  eval_indexes=[0, 1, 2])
    model.fit(2, dataset(3 * BATCH), dataset(2 * BATCH), callbacks=[recorder, monitor],
              dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    check(log.of_kind("state"), recorder.steps)
    assert [e["eval"]["mae"] is not None for e in log.of_kind("epoch")] == [True, True]


def test_the_functional_loop(tmp_path, mode):
    net, loss_fn = make_net(), nn.MSELoss()
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None)

    def forward_fn(x, y):
        return loss_fn(net(x), y)

    step = monitor.jit_step(forward_fn, optimizer, network=net, activations=WATCHED,
                            attention_logits=["enc.self_attn"])
    x, y = arrays(STEPS * BATCH)
    seen = {}
    for n in range(1, STEPS + 1):
        batch = x[(n - 1) * BATCH:n * BATCH], y[(n - 1) * BATCH:n * BATCH]
        seen[n] = (_copies(net.get_parameters()), batch[0])
        monitor.observe(step=n, outputs=step(*(ms.Tensor(a) for a in batch)))
    monitor.close()
    check(read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("state"), seen)


def test_bad_requests_say_what_to_change(tmp_path):
    net = make_net()
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(tmp_path / "a"), hardware_interval_s=None)
    with pytest.raises(ValueError, match=r"'blocks\.\*' matches no sub-Cell.*inp, enc"):
        monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer, activations=["blocks.*"])
    with pytest.raises(TypeError, match="list of fnmatch patterns"):
        monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer, activations="inp")
    with pytest.raises(ValueError, match="needs network="):
        monitor.jit_step(lambda x, y: x, optimizer, activations=["inp"])
    off = TrainMonitor(str(tmp_path / "b"), hardware_interval_s=None, state_interval=None)
    with pytest.raises(ValueError, match="state_interval=None turns them off"):
        off.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer, activations=["inp"])


def test_grown_query_weights_are_an_attention_logit_anomaly_naming_the_cell(tmp_path, mode):
    """The queries' projection scaled x40 before training: the first state step reports the
    logit, above max_attention_logit, as a warning; training goes on."""
    net = make_net()
    weight = net.enc.self_attn.in_proj_weight
    scaled = weight.asnumpy().copy()
    scaled[:D] *= 40.0
    ops.assign(weight, ms.Tensor(scaled))
    optimizer = nn.Adam(net.trainable_params(), 1e-3)
    monitor = TrainMonitor(str(tmp_path), state_interval=INTERVAL, hardware_interval_s=None,
                           max_attention_logit=50.0)
    Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer,
                       attention_logits=["enc.self_attn"])).train(
        1, dataset(STEPS * BATCH), callbacks=[monitor], dataset_sink_mode=False)
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    [found] = log.anomalies
    first = log.of_kind("state")[0]
    assert (found["anomaly"], found["step"], found["layer"], found["actions"]) == (
        "attention_logit", 2, "enc.self_attn", ["warn"])
    assert found["value"] == first["activations"]["enc.self_attn"]["max_logit"] > 50.0
    assert log.end["reason"] == "completed" and len(log.steps) == STEPS


def test_a_cell_shared_by_two_parents_is_probed_once_with_what_both_names_asked():
    shared = nn.Dense(2, 2)

    class Holder(nn.Cell):
        def __init__(self):
            super().__init__()
            self.x = shared

        def construct(self, v):
            return self.x(v)

    class Twice(nn.Cell):
        def __init__(self):
            super().__init__()
            self.p, self.q = Holder(), Holder()

        def construct(self, v):
            return self.q(self.p(v))

    from mindwatch.mindspore.probes.activation_probe import LOGITS_FROM_OUTPUT, ActivationProbes
    probes = ActivationProbes(Twice(), activations=["p.x"], attention_logits=["q.x"])
    assert list(probes.cells) == ["p.x"]
    assert shared.mindwatch_outputs is True and shared.mindwatch_logits == LOGITS_FROM_OUTPUT
