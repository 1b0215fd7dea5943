"""One rank of the scale tests' MindSpore job (not a test module): ``Model.train`` over a
data-parallel Cell (``monitor.wrap``), each rank its own data, under msrun on one host or on
two (test_msrun_scale.py).

    msrun ... ms_scale_trainer.py LOG_DIR NAN_RANK NAN_STEP [again]

Rank NAN_RANK's batch NAN_STEP is NaN, on that rank only: its loss is NaN, and the reduced
gradients are NaN on every rank. ``loss_nonfinite`` and ``gradient_nonfinite`` stop the job;
every other rule warns, as by default. ALERT_WEBHOOK in the environment: every rank posts its
alerts there. ``again``: the job started again in LOG_DIR (``resume=True``), its data in
another order: rank NAN_RANK's NaN batch comes at step AGAIN_STEP, its rows shuffled (issue
#46: the ledger's batch, withheld by itself).
"""
import os
import sys

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore.communication import get_rank, init

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mindspore"))
from ms_rank import start, train

from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_arrays

STEPS = 24
AGAIN_STEP = 5


def main(log_dir, nan_rank, nan_step, again=None):
    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    rank = get_rank()
    x, y = regression_arrays(8 * STEPS, seed=rank,
                             nan_at=int(nan_step) if rank == int(nan_rank) else None)
    if again and rank == int(nan_rank):
        bad = slice(8 * int(nan_step) - 8, 8 * int(nan_step))
        rows = np.random.default_rng(3).permutation(8)
        before = 8 * AGAIN_STEP - 8              # the samples of the steps before it
        rests = [np.delete(v, bad, axis=0) for v in (x, y)]
        x, y = (np.concatenate([rest[:before], v[bad][rows], rest[before:]])
                for rest, v in zip(rests, (x, y), strict=True))
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    # straggler_window past the run's steps: 16 ranks on 2 cores take turns at random, and
    # an input pipeline that waited on a busy core is no straggler this job injects (the
    # job log's one event is the NaN's)
    monitor = TrainMonitor(log_dir, hardware_interval_s=None, print_interval=100,
                           straggler_window=2 * STEPS,
                           on_anomaly={"loss_nonfinite": "stop", "gradient_nonfinite": "stop"},
                           alert_webhook=os.environ.get("ALERT_WEBHOOK"), resume=bool(again))
    train(monitor, make_regressor(), data)


if __name__ == "__main__":
    start(main, 4)
