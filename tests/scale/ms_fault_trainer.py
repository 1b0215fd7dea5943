"""One rank of the scale tests' hang jobs (not a test module): ``Model.train`` over a
data-parallel Cell (``monitor.wrap``) under msrun, one rank made to hold the others.

    msrun ... ms_fault_trainer.py LOG_DIR FAULT RANK STEP

FAULT, on rank RANK only:

- ``user``: before step STEP its own callback (ahead of mindwatch's) sleeps: stuck in user
  code, the others wait in step STEP's gradient all-reduce;
- ``loader``: its dataset's source sleeps on the batch of step STEP: stuck in its data loader;
- ``start``: it sleeps after making its monitor, before ``Model.train``: it never starts,
  the others wait in the ranks' start-up exchange;
- ``kill``: it kills itself (SIGKILL) at the end of step STEP-1.

``hang_timeout_s`` is HANG_TIMEOUT_S and every rank aborts on a hang: the job ends with the
launcher's status, the answer in rank 0's job log.
"""
import os
import signal
import sys
import time

import mindspore as ms
from mindspore import dataset as ds
from mindspore.communication import get_rank, init
from mindspore.train import Callback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mindspore"))
from ms_rank import start, train

from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_arrays

STEPS = 40
HANG_TIMEOUT_S = 8.0
STUCK_S = 600.0              # longer than any test waits: the hang ends with the job


class Batches:
    """A random-access source whose item ``stuck_at`` (0-based batch) sleeps."""

    def __init__(self, x, y, stuck_at):
        self.x, self.y, self.stuck_at = x, y, stuck_at

    def __getitem__(self, index):
        if index == self.stuck_at:
            time.sleep(STUCK_S)
        return self.x[index * 8:(index + 1) * 8], self.y[index * 8:(index + 1) * 8]

    def __len__(self):
        return STEPS


class StuckBefore(Callback):
    """The user's own callback: sleeps as step ``step`` begins."""

    def __init__(self, step):
        self.step = step

    def on_train_step_begin(self, run_context):
        if run_context.original_args().cur_step_num == self.step:
            time.sleep(STUCK_S)


class KilledAfter(Callback):
    def __init__(self, step):
        self.step = step

    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main(log_dir, fault, fault_rank, fault_step):
    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    rank, fault_step = get_rank(), int(fault_step)
    faulty = rank == int(fault_rank)
    x, y = regression_arrays(8 * STEPS, seed=rank)
    stuck_at = fault_step - 1 if faulty and fault == "loader" else None
    # one worker, no prefetch past the stuck batch's neighbours: the main thread waits for it
    ds.config.set_prefetch_size(1)
    data = ds.GeneratorDataset(Batches(x, y, stuck_at), ["x", "y"], shuffle=False,
                               num_parallel_workers=1, python_multiprocessing=False)
    monitor = TrainMonitor(log_dir, hardware_interval_s=None, print_interval=100,
                           straggler_window=2 * STEPS, hang_timeout_s=HANG_TIMEOUT_S,
                           on_anomaly={"hang": "abort"})
    if faulty and fault == "start":
        time.sleep(STUCK_S)
    callbacks = [monitor]
    if faulty and fault == "user":
        callbacks.insert(0, StuckBefore(fault_step))
    if faulty and fault == "kill":
        callbacks.append(KilledAfter(fault_step - 1))
    train(monitor, make_regressor(), data, callbacks)


if __name__ == "__main__":
    start(main, 4)
