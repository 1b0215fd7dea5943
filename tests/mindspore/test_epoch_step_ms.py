"""``epoch_step`` under real MindSpore training: the step within its epoch, numbered from
cb_params as MindSpore's LossMonitor and MindFormers' MFLossMonitor number it."""
import mindspore as ms
from mindspore import nn
from mindspore.train import Callback
from mindspore.train.callback import RunContext, _InternalCallbackParam

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.reading.cb_params import epoch_position
from mindwatch.runlog import read_rank_log
from ms_helpers import make_regressor, regression_arrays, regression_dataset

N = 5                    # steps per epoch: 40 samples, batches of 8


class _LossMonitorLine(Callback):
    """What MindSpore's own LossMonitor prints as "epoch: E step: S", by global step."""

    def __init__(self):
        self.printed = {}

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        self.printed[cb.cur_step_num] = (cb.cur_epoch_num, (cb.cur_step_num - 1) % cb.batch_num + 1)


def _train(tmp_path, quiet, wrap, **train):
    net = make_regressor()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None)
    if wrap:
        model = ms.train.Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    else:
        model = ms.train.Model(net, nn.MSELoss(), optimizer)
    spy = _LossMonitorLine()
    model.train(2, regression_dataset(n=8 * N), callbacks=[spy, monitor], **train)
    return read_rank_log(str(tmp_path / "rank_0.jsonl")), spy.printed


def test_two_epochs_number_every_step_within_its_epoch(tmp_path, quiet, graph_mode):
    log, printed = _train(tmp_path, quiet, wrap=True, dataset_sink_mode=False)
    steps = log.steps
    assert [s["step"] for s in steps] == list(range(1, 2 * N + 1))
    for s in steps:
        assert s["epoch_step"] == (s["step"] - 1) % N + 1, s
        assert s["epoch"] == (s["step"] - 1) // N + 1, s
        assert s["steps_per_epoch"] == N
        assert (s["epoch"], s["epoch_step"]) == printed[s["step"]]      # MindSpore's own
    assert [(e["epoch"], e["steps"]) for e in log.of_kind("epoch")] == [(1, N), (2, N)]


def test_without_wrap_in_pynative_mode_too(tmp_path, quiet, pynative_mode):
    log, _ = _train(tmp_path, quiet, wrap=False, dataset_sink_mode=False)
    assert [(s["epoch"], s["epoch_step"]) for s in log.steps] == [
        (e, i) for e in (1, 2) for i in range(1, N + 1)]


def test_sink_mode_the_cpu_dropped_counts_the_whole_dataset_not_the_sink(tmp_path, quiet,
                                                                         graph_mode):
    """On the CPU MindSpore trains without sink mode, but batch_num stays the sink size it
    does not use: each epoch is still one pass over the dataset."""
    log, _ = _train(tmp_path, quiet, wrap=True, dataset_sink_mode=True, sink_size=2)
    steps = log.steps
    assert [s["step"] for s in steps] == list(range(1, 2 * N + 1))
    assert [(s["epoch"], s["epoch_step"], s["steps_per_epoch"]) for s in steps] == [
        (e, i, N) for e in (1, 2) for i in range(1, N + 1)]


def test_a_sink_is_numbered_by_its_last_step(tmp_path, quiet, graph_mode):
    """On Ascend/GPU a callback covers a sink (cur_step_num jumps by its size, an epoch is
    one sink of batch_num steps); the CPU has no sink, so it is driven by hand."""
    net = make_regressor()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None)
    step_cell = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    cb = _InternalCallbackParam()
    cb.cur_step_num, cb.epoch_num, cb.batch_num = 0, 3, 4
    cb.train_network, cb.optimizer, cb.dataset_sink_mode = step_cell, None, True
    context = RunContext(cb)
    x, y = (ms.Tensor(a) for a in regression_arrays(8))
    monitor.on_train_begin(context)
    for epoch in (1, 2, 3):
        cb.cur_epoch_num = epoch
        for _ in range(4):
            cb.net_outputs = step_cell(x, y)
        cb.cur_step_num += 4
        monitor.on_train_step_end(context)
        monitor.on_train_epoch_end(context)
    monitor.on_train_end(context)
    steps = read_rank_log(str(tmp_path / "rank_0.jsonl")).steps
    assert [(s["step"], s["epoch"], s["epoch_step"], s["steps_per_epoch"], s["steps_covered"])
            for s in steps] == [(4, 1, 4, 4, 4), (8, 2, 4, 4, 4), (12, 3, 4, 4, 4)]


def test_a_run_resumed_at_an_epoch_numbers_as_mindspore_does(tmp_path, quiet, graph_mode):
    """Model.train(3, initial_epoch=1): cur_step_num starts again at 1, in epoch 2."""
    net = make_regressor()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None)
    model = ms.train.Model(monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), optimizer))
    spy = _LossMonitorLine()
    model.train(3, regression_dataset(n=8 * N), callbacks=[spy, monitor],
                dataset_sink_mode=False, initial_epoch=1)
    steps = read_rank_log(str(tmp_path / "rank_0.jsonl")).steps
    # cur_step_num counts this call's steps: step 1 is epoch 2's first
    assert [(s["step"], s["epoch"], s["epoch_step"]) for s in steps] == [
        ((e - 2) * N + i, e, i) for e in (2, 3) for i in range(1, N + 1)]
    assert all((s["epoch"], s["epoch_step"]) == spy.printed[s["step"]] for s in steps)


def _cb(step, *, batch_num=20, sink=False):
    cb = _InternalCallbackParam()
    cb.cur_step_num, cb.batch_num, cb.dataset_sink_mode = step, batch_num, sink
    return cb


def test_a_resumed_count_numbers_on_from_where_it_resumed():
    # MindWatchMonitor hands a resumed MindFormers run's count (initial_step on) in as
    # cur_step_num: after 26 steps of 20-step epochs, MFLossMonitor prints 7, 8, ... 20, 1
    assert [epoch_position(_cb(26 + s))[0] for s in (1, 2, 14, 15)] == [7, 8, 20, 1]
    assert epoch_position(_cb(40)) == (20, 20) and epoch_position(_cb(41)) == (1, 20)


def test_an_unknown_epoch_length_is_null_never_a_made_up_number():
    assert epoch_position(_InternalCallbackParam()) == (None, None)
    assert epoch_position(_cb(3, batch_num=None, sink=True)) == (None, None)
    assert epoch_position(_cb(3, batch_num=-1, sink=True)) == (None, None)
