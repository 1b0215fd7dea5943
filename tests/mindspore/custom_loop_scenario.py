"""multirank_trainer.py's custom-loop scenario (not a test module): the loop of
docs/pipelines.md, ``monitor.jit_step`` + ``observe`` + ``stop_requested``, on two data-parallel
ranks, with a cause local to one rank: rank 1 sends itself SIGTERM during step SIGNAL_STEP.

Rank 1 stops on its own signal; rank 0 learns of it only through the ranks' exchange at the
step's end, which ``observe`` runs as ``Model.train`` does. Without it rank 0 would train on
into step SIGNAL_STEP + 1's collective, which rank 1 never joins. The signal takes its usual
course once rank 1's monitor closes: the script's own SIGTERM handler, which mindwatch chains
to, raises ``Preempted``, caught here so that the job's later scenarios still run.
"""
import os
import signal

import mindspore as ms
import numpy as np
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_arrays

STEPS, SIGNAL_STEP = 40, 20


class Preempted(Exception):
    pass


def _preempted(signum, frame):
    raise Preempted(signum)


def train_loop(log_dir, out_dir, rank, settings):
    previous = signal.signal(signal.SIGTERM, _preempted)
    net = make_regressor()
    loss_fn = nn.MSELoss()
    monitor = TrainMonitor(log_dir, **settings)

    def forward_fn(x, y):
        return loss_fn(net(x), y)

    train_step = monitor.jit_step(forward_fn, nn.Adam(net.trainable_params(),
                                                      learning_rate=0.01))
    x, y = regression_arrays(8 * STEPS, seed=rank)
    interrupted = False
    try:
        for step in range(1, STEPS + 1):
            if rank == 1 and step == SIGNAL_STEP:
                os.kill(os.getpid(), signal.SIGTERM)
            batch = slice(8 * (step - 1), 8 * step)
            outputs = train_step(ms.Tensor(x[batch]), ms.Tensor(y[batch]))
            monitor.observe(step=step, outputs=outputs)
            if monitor.stop_requested:
                break
        monitor.close()
    except Preempted:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    np.savez(os.path.join(out_dir, f"weights_rank{rank}.npz"),
             **{p.name: p.asnumpy() for p in net.get_parameters()})
    with open(os.path.join(out_dir, f"interrupted_rank{rank}"), "w") as out:
        out.write(str(interrupted))
