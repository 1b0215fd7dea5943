"""One rank of the scale tests' slow-rank jobs (not a test module): ``Model.train`` over a
data-parallel Cell (``monitor.wrap``) under msrun, one rank slower than the others.

    msrun ... ms_slow_trainer.py LOG_DIR CAUSE RANKS

CAUSE, on the ranks of RANKS only (a rank set: "5", "4-7"):

- ``compute``: its network does an extra EXTRA x EXTRA matmul chain inside the step's graph
  (more CPU work before the gradient all-reduce; ~1.4x the others' CPU time per step here);
- ``data``: its dataset's source sleeps DATA_S per batch (behind a prefetch of 2): its input
  pipeline cannot keep up, so every step waits for its batch.

Every rule warns (the default); the hardware sampler is off (no host cause to find).
"""
import os
import sys
import time

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn, ops
from mindspore.communication import get_rank, init

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mindspore"))
from ms_rank import start, train

from mindwatch.basics.rank_set import parse_rank_set
from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_arrays

STEPS = 90
EXTRA = 384
DATA_S = 0.15


class Slower(nn.Cell):
    """``net`` plus, when ``extra``, a matmul chain whose result is added times zero (so the
    graph keeps it)."""

    def __init__(self, net, extra):
        super().__init__()
        self.net, self.extra = net, extra
        rng = np.random.default_rng(0)
        self.m = ms.Tensor(rng.standard_normal((EXTRA, EXTRA)).astype(np.float32) / EXTRA)

    def construct(self, x):
        out = self.net(x)
        if self.extra:
            w = ops.matmul(ops.matmul(self.m, self.m), self.m)
            out = out + 0.0 * w[0, 0]
        return out


class Batches:
    """A random-access source of 8-sample batches, each ``delay_s`` late."""

    def __init__(self, x, y, delay_s):
        self.x, self.y, self.delay_s = x, y, delay_s

    def __getitem__(self, index):
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[index * 8:(index + 1) * 8], self.y[index * 8:(index + 1) * 8]

    def __len__(self):
        return len(self.x) // 8


def main(log_dir, cause, slow_rank):
    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    rank = get_rank()
    slow = rank in parse_rank_set(slow_rank)
    ds.config.set_prefetch_size(2)          # a slow source shows within a few steps
    x, y = regression_arrays(8 * STEPS, seed=rank)
    data = ds.GeneratorDataset(Batches(x, y, DATA_S if slow and cause == "data" else 0.0),
                               ["x", "y"], shuffle=False, python_multiprocessing=False,
                               num_parallel_workers=1)
    monitor = TrainMonitor(log_dir, hardware_interval_s=None, print_interval=100)
    net = Slower(make_regressor(), slow and cause == "compute")
    train(monitor, net, data)


if __name__ == "__main__":
    start(main, 3)
