import io
import math

import pytest

from mindwatch import Monitor
from mindwatch.runlog import read_run


def write_run(directory, clock, *, ranks, steps, loss, grad=1.0, explode=None, nan_last=False,
              **settings):
    """A real run log written by the core Monitor: ``loss(step, rank)``; gradient norms from
    ``grad`` up, 500 at ``explode = (step, rank)``; a NaN loss at the last step of rank 0
    (``nan_last``)."""
    for rank in range(ranks):
        monitor = Monitor(str(directory), rank=rank, world_size=ranks, clock=clock,
                          stream=io.StringIO(), batch_size=8, hardware_interval_s=None,
                          on_anomaly="warn", **settings)
        for step in range(1, steps + 1):
            clock.advance(0.1 + 0.01 * (step % 3) + 0.02 * rank)
            value = math.nan if nan_last and rank == 0 and step == steps else loss(step, rank)
            norm = 500.0 if (step, rank) == explode else grad + 0.1 * (step % 5)
            monitor.observe(step=step, epoch=1, loss=value, lr=1e-3 * min(1.0, step / 10),
                            grad_norm=norm)
        monitor.close()
    return read_run(str(directory))


@pytest.fixture
def two_runs(tmp_path, clock):
    """Two runs to compare, in tmp_path/runs: ``lr-high``, one rank, 60 steps, its last loss
    NaN, larger gradients; ``lr-low``, two ranks, 80 steps, lower losses, a gradient
    explosion on rank 1 at step 40 and another grad_explode threshold.
    Returns (directories, RunLogs)."""
    high, low = tmp_path / "runs" / "lr-high", tmp_path / "runs" / "lr-low"
    runs = [write_run(high, clock, ranks=1, steps=60, nan_last=True, grad=2.0,
                      loss=lambda step, rank: 3.0 / (1 + step / 20)),
            write_run(low, clock, ranks=2, steps=80, explode=(40, 1), grad_explode=200.0,
                      loss=lambda step, rank: 2.0 / (1 + step / 30) + 0.01 * rank)]
    return [str(high), str(low)], runs
