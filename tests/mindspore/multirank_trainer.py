"""The training script the msrun tests launch on every rank (not a test module itself).

    msrun ... multirank_trainer.py ROOT SCENARIO [SCENARIO ...]

Each SCENARIO in turn, in this one process (one msrun job, one cluster start-up for all):
its run log in ROOT/SCENARIO/run, the weights each rank ends with in ROOT/SCENARIO/out, and
ROOT/SCENARIO/done_rank<R> once rank R finished it (what a scenario sets for itself, the
input queue's size and PATH, is put back before the next).

SCENARIO: healthy | nan_rank1 | overheat_rank0 | straggler_rank1 | long (runs until a signal
stops it) | spike_rank1_skip (rank 1's targets x1e3 at SPIKE_STEP, on_anomaly "skip") |
spike_rank1_rewind (the same spike, on_anomaly "rewind", a snapshot every 5 steps) |
bad_batch_rank1, bad_batch_fit_rank1, bad_batch_loop_rank1 and each one's ..._again (a bad
batch, then the run directory resumed with the data in another order, under Model.train,
Model.fit and the functional loop: bad_batch_scenario.py) |
loop_signal_rank1 (a custom loop, jit_step + observe, rank 1 signalled:
custom_loop_scenario.py) | hang_rank1 (rank 1's data source blocks STALL_S seconds at batch
STALL_STEP; the other rank waits for it in a collective; hang_timeout_s HANG_TIMEOUT_S, policy
warn) | nudge_rank1 (one weight element of rank 1 moved by 1e-3 before step NUDGE_STEP,
replicas compared every CONSISTENCY_INTERVAL steps) | slowdown_rank1 (rank 1's input pipeline
slows down from batch SLOWDOWN_STEP on, SLOWDOWN_S a batch; 20 ms of compute a step;
trend_warmup 5, pace_window 8, throughput_drop_factor 2). Every scenario compares the replicas
every CONSISTENCY_INTERVAL steps.
Data parallel on the CPU, each rank its own data, gradients reduced by
monitor.wrap.
"""
import gc
import os
import sys
import threading
import time

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn
from mindspore.communication import get_rank, init
from mindspore.train import Callback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bad_batch_scenario import run as bad_batch_run
from custom_loop_scenario import train_loop
from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_arrays

NAN_STEP = 5
SPIKE_STEP = 15
STALL_STEP, STALL_S, HANG_TIMEOUT_S = 6, 8.0, 3.0


class Slow(Callback):
    def on_train_step_end(self, run_context):
        time.sleep(0.02)


# 300 ms a batch: the generator prepares the next batch while a step runs, so only what is
# left of the wait after the step shows; above any step of a loaded host (three processes on
# two cores), it shows on every step.
SLOWDOWN_STEP, SLOWDOWN_S = 25, 0.3


def batches(rank, steps, nan_at, slow, spike_at=None, slow_from=1, slow_s=0.1):
    x, y = regression_arrays(8 * steps, seed=rank, nan_at=nan_at)
    if spike_at is not None:            # a loss spike, on this rank only
        y[8 * (spike_at - 1): 8 * spike_at] *= 1e3

    def generate():
        for i in range(steps):
            if slow and i + 1 >= slow_from:
                time.sleep(slow_s)        # a slow input pipeline on this rank
            yield x[8 * i: 8 * i + 8], y[8 * i: 8 * i + 8]
    return ds.GeneratorDataset(generate, ["x", "y"], shuffle=False)


# Set when rank 1 has trained up to the stall (StallAfter). The data source waits for it
# before it stalls: otherwise it stalls as soon as its prefetching reaches that batch, and
# the time the first steps take (compiling, slow on a loaded host) ate into the stall.
REACHED_STALL = threading.Event()


def a_data_source_that_stalls():
    time.sleep(STALL_S)


class StallAfter(ms.train.Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == STALL_STEP - 1:
            REACHED_STALL.set()


class StallingBatches:
    """Rank 1's data for hang_rank1; sized, so MindSpore does not iterate it once to count."""

    def __init__(self, rank, steps):
        self.x, self.y = regression_arrays(8 * steps, seed=rank)
        self.steps, self.stall = steps, rank == 1

    def __len__(self):
        return self.steps

    def __getitem__(self, i):
        if self.stall and i + 1 == STALL_STEP:
            self.stall = False
            REACHED_STALL.wait(timeout=120)
            a_data_source_that_stalls()
        return self.x[8 * i: 8 * i + 8], self.y[8 * i: 8 * i + 8]


CONSISTENCY_INTERVAL, NUDGE_STEP = 4, 6


class NudgeAt(ms.train.Callback):
    """Before step ``step``: one element of the first weight moved by 1e-3, on this rank only
    (a bit flip's stand-in: the replicas silently diverge from here)."""

    def __init__(self, step):
        self.step = step

    def on_train_step_begin(self, run_context):
        cb = run_context.original_args()
        if cb.cur_step_num == self.step:
            weight = cb.train_network.weights[0]
            value = weight.asnumpy().copy()
            value.flat[0] += 1e-3
            ms.ops.assign(weight, ms.Tensor(value))


def train(log_dir, out_dir, scenario, rank):
    settings = dict(hardware_interval_s=None, print_interval=5,
                    consistency_interval=CONSISTENCY_INTERVAL)
    steps, epochs, callbacks = 12, 2, []
    if scenario == "overheat_rank0":
        steps, callbacks = 200, [Slow()]
        settings.update(hardware_interval_s=0.1, max_temperature_c=85.0, overheat_samples=3)
        if rank == 0:
            os.environ["PATH"] = os.environ["FAKE_NPU_DIR"] + os.pathsep + os.environ["PATH"]
    if scenario == "long":
        steps, epochs, callbacks = 1000, 1, [Slow()]
    if scenario == "straggler_rank1":
        steps, epochs = 40, 1
        settings.update(straggler_window=10)
    if scenario == "spike_rank1_skip":
        steps, epochs = 24, 1
        # grad_explode out of reach: the loss limit alone withholds, on both ranks.
        settings.update(on_anomaly={"loss_spike": "skip"}, grad_explode=1e30,
                        spike_window=16, spike_warmup=8)
    if scenario == "spike_rank1_rewind":
        steps, epochs = 24, 1
        settings.update(on_anomaly={"loss_spike": "rewind"}, grad_explode=1e30,
                        spike_window=16, spike_warmup=8, snapshot_every=5)
    spiking = scenario.startswith("spike_rank1") and rank == 1
    if scenario == "hang_rank1":
        epochs, callbacks = 1, [StallAfter()]
        settings.update(hang_timeout_s=HANG_TIMEOUT_S)
    if scenario == "slowdown_rank1":
        # 20 ms of steady compute a step and a factor of 2: the host's other load (three
        # processes on two cores in CI) is not the slowdown this scenario injects
        steps, epochs, callbacks = 50, 1, [Slow()]
        settings.update(trend_warmup=5, pace_window=8, throughput_drop_factor=2.0)
        # A queue of one batch between the generator and the step: with the default (16
        # batches, made ahead while the input was fast) the slowdown reached the steps only
        # ~16 steps late, and on a loaded host sometimes after the run's last step.
        ds.config.set_prefetch_size(1)
    if scenario == "nudge_rank1" and rank == 1:
        callbacks = [NudgeAt(NUDGE_STEP)]
    if scenario.startswith("bad_batch"):
        return bad_batch_run(os.path.dirname(os.path.dirname(log_dir)), out_dir, scenario,
                             rank, settings)
    if scenario == "loop_signal_rank1":
        return train_loop(log_dir, out_dir, rank, settings)
    if scenario == "overheat_rank0" and os.environ.get("ALERT_WEBHOOK"):
        # the test's webhook service, on every rank
        settings.update(alert_webhook=os.environ["ALERT_WEBHOOK"])
    net = make_regressor()
    monitor = TrainMonitor(log_dir, **settings)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()),
                        nn.Adam(net.trainable_params(), learning_rate=0.01))
    data = batches(rank, steps, NAN_STEP if scenario == "nan_rank1" and rank == 1 else None,
                   slow=scenario in ("straggler_rank1", "slowdown_rank1") and rank == 1,
                   spike_at=SPIKE_STEP if spiking else None,
                   slow_from=SLOWDOWN_STEP if scenario == "slowdown_rank1" else 1,
                   slow_s=SLOWDOWN_S if scenario == "slowdown_rank1" else 0.1)
    if scenario == "hang_rank1":
        data = ds.GeneratorDataset(StallingBatches(rank, steps), ["x", "y"], shuffle=False)
    ms.train.Model(step).train(epochs, data, callbacks=[*callbacks, monitor],
                               dataset_sink_mode=False)
    np.savez(os.path.join(out_dir, f"weights_rank{rank}.npz"),
             **{p.name: p.asnumpy() for p in net.get_parameters()})


def main(root, *scenarios):
    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    rank = get_rank()
    for scenario in scenarios:
        where = os.path.join(root, scenario)
        out_dir = os.path.join(where, "out")
        os.makedirs(out_dir, exist_ok=True)
        path, prefetch = os.environ["PATH"], ds.config.get_prefetch_size()
        try:
            train(os.path.join(where, "run"), out_dir, scenario, rank)
        finally:
            os.environ["PATH"] = path
            ds.config.set_prefetch_size(prefetch)
        with open(os.path.join(where, f"done_rank{rank}"), "w"):
            pass


if __name__ == "__main__":
    gc.freeze()            # the imports' objects, out of MindSpore's gc.collect() a compile
    # one CPU kernel thread, as tests/conftest.py sets for the test processes (its note)
    ms.device_context.cpu.op_tuning.threads_num(1)
    main(*sys.argv[1:])
