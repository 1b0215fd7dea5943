"""Issue #46 on MindSpore (mindspore/reading/batch.py), real training on the CPU: a run stops
on a NaN-poisoned batch, its anomaly names the batch and bad_batches.jsonl keeps it; the run
restarted with its data in another order withholds that batch's update by itself, in wrap's
graph, before it is applied (no anomaly, one notice, the weights untouched by that step) and
stops on the next new bad batch. skip_batches does the same from another run's ledger; a
train cell that cannot withhold says so and claims nothing."""
import json

import mindspore as ms
import numpy as np
import pytest
from mindspore import dataset as ds
from mindspore import nn
from mindspore.train import Callback, Model

from mindwatch import batch_fingerprint
from mindwatch.basics.batch_identity import host_numbers, identity
from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.reading.batch import BatchGuard, host_identity
from ms_helpers import make_regressor, regression_arrays, weights_of

BATCH, BATCHES = 8, 6
STOP = {"loss_nonfinite": "stop"}


def _batches(poisoned=(), seed=0):
    """The 6 batches (x, y) of the regression data; ``poisoned``: 0-based batches given a NaN."""
    x, y = regression_arrays(BATCH * BATCHES, seed)
    out = [(x[i * BATCH:(i + 1) * BATCH].copy(), y[i * BATCH:(i + 1) * BATCH].copy())
           for i in range(BATCHES)]
    for index in poisoned:
        out[index][0][index % BATCH, index % 4] = np.nan
    return out


def _dataset(batches):
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


def _fingerprint(batch):
    return identity(host_numbers(batch))["fingerprint"]


class Weights(Callback):
    """Every step's weights before and after it (placed before the monitor)."""

    def __init__(self, net):
        self.net, self.before, self.after = net, {}, {}

    def on_train_step_begin(self, run_context):
        self.before[run_context.original_args().cur_step_num] = weights_of(self.net)

    def on_train_step_end(self, run_context):
        self.after[run_context.original_args().cur_step_num] = weights_of(self.net)


def _train(log_dir, batches, *, wrap=True, pipeline="train", **settings):
    """One run over ``batches`` (``pipeline``: Model.train, Model.fit with an evaluation
    each epoch, or the functional loop, jit_step + observe); returns every step's weights
    before and after it."""
    net = make_regressor()
    optimizer = nn.Adam(net.trainable_params(), 1e-2)
    monitor = TrainMonitor(str(log_dir), hardware_interval_s=None, on_anomaly=STOP, **settings)
    weights = Weights(net)
    if pipeline == "loop":
        loss_fn = nn.MSELoss()

        def forward_fn(x, y):           # MindSpore's parser takes no lambda inside a call
            return loss_fn(net(x), y)

        step = monitor.jit_step(forward_fn, optimizer)
        for number, (x, y) in enumerate(batches, start=1):
            weights.before[number] = weights_of(net)
            monitor.observe(step=number, outputs=step(ms.Tensor(x), ms.Tensor(y)))
            weights.after[number] = weights_of(net)
            if monitor.stop_requested:
                break
        monitor.close()
        return weights
    if wrap:
        model = Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer),
                      eval_network=nn.WithEvalCell(net, nn.MSELoss()), metrics={"mae"},
                      eval_indexes=[0, 1, 2])
    else:
        model = Model(net, nn.MSELoss(), optimizer)
    if pipeline == "fit":
        model.fit(1, _dataset(batches), _dataset(_batches()[:2]),
                  callbacks=[weights, monitor], dataset_sink_mode=False)
    else:
        model.train(1, _dataset(batches), callbacks=[weights, monitor],
                    dataset_sink_mode=False)
    return weights


def _segment(log_dir):
    """The last run segment's records."""
    records = [json.loads(line) for line in (log_dir / "rank_0.jsonl").read_text().splitlines()]
    return records[max(i for i, r in enumerate(records) if r["kind"] == "run"):]


def _ledger(log_dir):
    return [json.loads(line) for line in (log_dir / "bad_batches.jsonl").read_text().splitlines()]


def _steps(segment):
    return {r["step"]: r for r in segment if r["kind"] == "step"}


@pytest.mark.parametrize("pipeline", ["train", "fit", "loop"])
def test_a_stopped_batch_is_withheld_by_itself_when_the_run_comes_back(tmp_path, mode,
                                                                       pipeline):
    run = tmp_path / "run"
    first = _batches(poisoned=[2])
    _train(run, first, pipeline=pipeline)
    segment = _segment(run)
    assert sorted(_steps(segment)) == [1, 2, 3]                 # stopped after the bad one
    bad = {"fingerprint": _fingerprint(first[2]), "indices": None}
    anomalies = [r for r in segment if r["kind"] == "anomaly"]
    assert {a["anomaly"] for a in anomalies} >= {"loss_nonfinite"}
    assert all(a["step"] == 3 and a["batch"] == bad for a in anomalies)
    [entry] = _ledger(run)
    assert (entry["fingerprint"], entry["indices"], entry["step"], entry["origin_rank"]) == (
        bad["fingerprint"], None, 3, 0)
    assert "loss_nonfinite" in entry["kinds"]

    # back with its data in another order: the bad batch second, its samples shuffled; a new
    # bad batch fourth
    second = _batches(poisoned=[2, 4])
    rng = np.random.default_rng(1)
    order = rng.permutation(BATCH)
    shuffled = (second[2][0][order], second[2][1][order])
    weights = _train(run, [second[3], shuffled, second[0], second[4], second[1], second[5]],
                     pipeline=pipeline, resume=True)
    segment = _segment(run)
    steps = _steps(segment)
    assert sorted(steps) == [1, 2, 3, 4]                        # stopped on the new one
    assert steps[2]["skipped"] is True and steps[2]["skip_reason"] == "known_bad_batch"
    assert steps[4]["skipped"] is True and "skip_reason" not in steps[4]
    assert [s["skipped"] for s in (steps[1], steps[3])] == [False, False]
    # its update was withheld: the weights after step 2 are those before it, to the bit
    for name, value in weights.before[2].items():
        np.testing.assert_array_equal(weights.after[2][name], value, err_msg=name)
    assert any(not np.array_equal(weights.after[3][n], v) for n, v in weights.before[3].items())
    # no anomaly (and no replay) for the known one, one notice; the new one stopped the run
    assert {a["step"] for a in segment if a["kind"] == "anomaly"} == {4}
    assert [r["step"] for r in segment if r["kind"] == "replay"] in ([], [4])
    said = [r["message"] for r in segment if r["kind"] == "notice" and "known bad" in
            r["message"]]
    assert len(said) == 1 and bad["fingerprint"] in said[0] and "bad at step 3" in said[0]
    assert [(e["step"], e["fingerprint"]) for e in _ledger(run)] == [
        (3, bad["fingerprint"]), (4, _fingerprint(second[4]))]


def _known(ledger, batch, step):
    """A ledger line for a clean batch, as a loss spike under "skip" leaves one: the update
    it would get is an ordinary one, so withholding it is seen in the weights."""
    with open(ledger, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"fingerprint": _fingerprint(batch), "indices": None,
                                 "step": step, "epoch": 1, "kinds": ["loss_spike"],
                                 "origin_rank": 0, "reproduced": None, "time": 0.0}) + "\n")


def test_skip_batches_names_another_runs_ledger(tmp_path, mode):
    _train(tmp_path / "first", _batches(poisoned=[2]))
    ledger = tmp_path / "first" / "bad_batches.jsonl"
    batches = _batches(poisoned=[2])
    _known(ledger, batches[4], 9)
    weights = _train(tmp_path / "second", [batches[2], *batches[:2], *batches[3:]],
                     skip_batches=str(ledger))
    segment = _segment(tmp_path / "second")
    withheld = [(1, True, "known_bad_batch"), (5, True, "known_bad_batch")]
    assert [(s["step"], s["skipped"], s.get("skip_reason")) for s in _steps(segment).values()
            if s["skipped"]] == withheld
    assert len(_steps(segment)) == BATCHES
    # the clean known batch (step 5): its ordinary update withheld in the graph, to the bit
    changed = {step: any(not np.array_equal(weights.after[step][n], v)
                         for n, v in weights.before[step].items()) for step in weights.before}
    assert changed == {1: False, 2: True, 3: True, 4: True, 5: False, 6: True}
    assert [r for r in segment if r["kind"] in ("anomaly", "replay")] == []
    said = [r["message"] for r in segment if r["kind"] == "notice" and "known bad" in
            r["message"]]
    assert len(said) == 2 and "bad at step 9: loss_spike" in said[1]
    assert segment[-1]["kind"] == "end" and segment[-1]["reason"] == "completed"
    assert not (tmp_path / "second" / "bad_batches.jsonl").exists()


def test_a_train_cell_that_cannot_withhold_says_so_and_claims_nothing(tmp_path, graph_mode):
    _train(tmp_path / "first", _batches(poisoned=[0]))
    batches = _batches(poisoned=[0])
    _train(tmp_path / "plain", batches, wrap=False,
           skip_batches=str(tmp_path / "first" / "bad_batches.jsonl"))
    segment = _segment(tmp_path / "plain")
    [step] = _steps(segment).values()           # applied, and stopped on as new
    assert step["skipped"] is False and "skip_reason" not in step
    said = [r["message"] for r in segment if r["kind"] == "notice" and "known bad" in
            r["message"]]
    assert len(said) == 1 and "cannot withhold" in said[0]
    assert {a["batch"]["fingerprint"] for a in segment if a["kind"] == "anomaly"} == {
        _fingerprint(batches[0])}


def test_the_functional_loop_withholds_a_known_batch(tmp_path, mode):
    ledger = tmp_path / "bad_batches.jsonl"
    batches = _batches()
    _known(ledger, batches[2], 3)
    net = make_regressor()
    loss_fn = nn.MSELoss()
    monitor = TrainMonitor(str(tmp_path / "loop"), hardware_interval_s=None, on_anomaly=STOP,
                           skip_batches=str(ledger))

    def forward_fn(x, y):
        return loss_fn(net(x), y)

    step = monitor.jit_step(forward_fn, nn.Adam(net.trainable_params(), 1e-2))
    changed = []
    for number, (x, y) in enumerate([batches[0], batches[2], batches[1]], start=1):
        before = weights_of(net)
        outputs = step(ms.Tensor(x), ms.Tensor(y))
        changed.append(any(not np.array_equal(v, before[n]) for n, v in weights_of(net).items()))
        monitor.observe(step=number, outputs=outputs)
        assert monitor.stop_requested is None
    monitor.close()
    assert changed == [True, False, True]
    steps = _steps(_segment(tmp_path / "loop"))
    assert [(s["skipped"], s.get("skip_reason")) for s in steps.values()] == [
        (False, None), (True, "known_bad_batch"), (False, None)]


def test_the_identity_is_the_batch_content_whatever_the_order():
    batch = _batches()[1]
    order = np.random.default_rng(2).permutation(BATCH)
    assert _fingerprint(batch) == _fingerprint((batch[0][order], batch[1][order]))
    assert _fingerprint(batch) != _fingerprint(_batches()[2])
    # Tensors as the callback gets them, a bfloat16 one by its float32 values; an input that
    # is not numbers (strings) is left out
    x, y = batch
    assert host_identity((ms.Tensor(x), ms.Tensor(y))) == identity(host_numbers(batch))
    halves = np.ones((2, 3), np.float32)
    assert host_identity((ms.Tensor(halves, ms.bfloat16), np.array(["a", "b"]))) == \
        identity(host_numbers([halves]))
    # mindwatch.batch_fingerprint, which finds a ledger's batch in the data, agrees
    assert batch_fingerprint(ms.Tensor(halves, ms.bfloat16), np.array(["a", "b"])) == \
        identity(host_numbers([halves]))["fingerprint"]
    assert host_identity(()) is None and host_identity((np.array(["a"]),)) is None


def test_sink_mode_says_once_that_nothing_is_withheld(tmp_path):
    ledger = tmp_path / "bad_batches.jsonl"
    _known(ledger, _batches()[0], 1)
    monitor = TrainMonitor(str(tmp_path / "run"), hardware_interval_s=None,
                           skip_batches=str(ledger))
    guard = BatchGuard(monitor.monitor)
    said = []
    monitor.monitor.notice = said.append
    guard.sink_mode()
    guard.sink_mode()
    assert len(said) == 1 and "dataset sink mode" in said[0]
    assert (guard.batch, guard.withheld) == (None, False)
    monitor.close()


def test_model_fit_withholds_the_batch_again_in_the_next_epoch(tmp_path):
    net, loss = make_regressor(), nn.MSELoss()
    monitor = TrainMonitor(str(tmp_path), hardware_interval_s=None, on_anomaly="warn")
    model = Model(monitor.wrap(nn.WithLossCell(net, loss), nn.Adam(net.trainable_params(), 1e-2)),
                  eval_network=nn.WithEvalCell(net, loss), metrics={"mae"},
                  eval_indexes=[0, 1, 2])
    batches = _batches(poisoned=[2])[:4]
    model.fit(2, _dataset(batches), _dataset(_batches()[:2]), callbacks=[monitor],
              dataset_sink_mode=False)
    segment = _segment(tmp_path)
    assert [(s["step"], s.get("skip_reason")) for s in _steps(segment).values()
            if s["skipped"]] == [(3, None), (7, "known_bad_batch")]
    assert {a["step"] for a in segment if a["kind"] == "anomaly"} == {3}
    assert [r["step"] for r in segment if r["kind"] == "replay"] == [3]
    assert [e["step"] for e in _ledger(tmp_path)] == [3]
    assert segment[-1]["reason"] == "completed"
