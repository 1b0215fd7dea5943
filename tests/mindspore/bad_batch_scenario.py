"""multirank_trainer.py's bad-batch scenarios (issue #46; not a test module), on two
data-parallel ranks, under each of MindSpore's pipelines: ``bad_batch_rank1`` (Model.train),
``bad_batch_fit_rank1`` (Model.fit, an evaluation each epoch) and ``bad_batch_loop_rank1``
(the functional loop: jit_step + observe).

Each first run: rank 1's batch BAD_STEP is all NaN; the job stops after it, and its ledger
keeps that batch, rank 1's. Each ``..._again`` run: a new run in the first's run directory
(``resume=True``), its data in another order: on rank 1 the known bad batch second, its rows
shuffled; on rank 0 its batch NEW_BAD_STEP all NaN, a new bad batch.
"""
import os

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn

from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_arrays

STEPS = 12
BAD_STEP, NEW_BAD_STEP = 3, 6


def batches(rank, again):
    """The rank's (x, y) batches of 8, as the scenario's run has them."""
    x, y = regression_arrays(8 * STEPS, seed=rank,
                             nan_at=BAD_STEP if rank == 1 else NEW_BAD_STEP if again else None)
    parts = [(x[8 * i: 8 * i + 8], y[8 * i: 8 * i + 8]) for i in range(STEPS)]
    if again and rank == 1:
        bad = parts.pop(BAD_STEP - 1)
        rows = np.random.default_rng(7).permutation(8)
        parts.insert(1, (bad[0][rows], bad[1][rows]))
    return parts


def run(root, out_dir, scenario, rank, settings):
    """``scenario`` on this rank; its run log in ROOT/<the first run's scenario>/run."""
    again = scenario.endswith("_again")
    first = scenario.removesuffix("_again")
    net, loss_fn = make_regressor(), nn.MSELoss()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=0.01)
    monitor = TrainMonitor(os.path.join(root, first, "run"), **settings, resume=again)
    parts = batches(rank, again)
    if "_loop" in scenario:
        def forward_fn(x, y):
            return loss_fn(net(x), y)

        step = monitor.jit_step(forward_fn, optimizer)
        for number, (x, y) in enumerate(parts, start=1):
            monitor.observe(step=number, outputs=step(ms.Tensor(x), ms.Tensor(y)))
            if monitor.stop_requested:
                break
        monitor.close()
    else:
        model = ms.train.Model(monitor.wrap(nn.WithLossCell(net, loss_fn), optimizer),
                               eval_network=nn.WithEvalCell(net, loss_fn), metrics={"mae"},
                               eval_indexes=[0, 1, 2])
        data = ds.GeneratorDataset(lambda: iter(parts), ["x", "y"], shuffle=False)
        if "_fit" in scenario:
            evaluation = ds.GeneratorDataset(lambda: iter(batches(rank, False)[:2]),
                                             ["x", "y"], shuffle=False)
            model.fit(1, data, evaluation, callbacks=[monitor], dataset_sink_mode=False)
        else:
            model.train(1, data, callbacks=[monitor], dataset_sink_mode=False)
    np.savez(os.path.join(out_dir, f"weights_rank{rank}.npz"),
             **{p.name: p.asnumpy() for p in net.get_parameters()})
