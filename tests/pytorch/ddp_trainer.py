"""One rank of a DDP job under torchrun (gloo, CPU), for test_ddp.py:
``torchrun --nproc_per_node=2 ddp_trainer.py LOG_DIR FAULT``. FAULT: ``none``, ``nan_rank1``
(rank 1's loss NaN at step 6), ``transient_rank1`` (the same, the first time step 6 is
computed only: its replay is healthy), ``own_comm_hook`` (the model has a communication hook
of the user's before protect), ``replica_rank1`` (a weight of rank 1 nudged after
step 4, so its replica differs from then on), or ``signal_rank1`` (rank 1 sends itself
SIGTERM during step 6; its own handler, which mindwatch chains to once the run is on disk,
raises ``Preempted``). Each backward is given a closure (replay). ``stop_exit_code=42``:
each rank writes ``exit_rank<R>`` (the status ``close`` exited with, or ``preempted``) in
LOG_DIR before it exits so.
``nan_rank<R>``: rank R's loss NaN at step 6 (tests/scale's jobs of more ranks).
``bad_batch_rank1``: rank 1's batch of step 6 holds a NaN (the data's, the same each run).
``bad_batches_dealt``: each rank's 12 batches fixed (the same as ``none``'s), rank 1's 6th and
rank 0's 10th holding a NaN (the data's); resumed, each rank's batches are dealt in the order
``DEALT`` and each one's rows shuffled: rank 1's bad batch comes at step 3, rank 0's, which the
first run never reached, at step 8.
``bad_sample_loader``: the data is a DataLoader over a ``DistributedSampler`` (shuffled, seed
0), given to protect (``data=``), whose sample ``BAD_SAMPLE`` holds a NaN.
A third argument ``resume``: the run directory resumed (``resume=True``) from scratch."""
import io
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch import nn

from mindwatch.torch import TrainMonitor

STEPS = 12
BAD_SAMPLE = 373         # rank 1's, at step 5
SIGNAL_STEP = 6
# bad_batches_dealt: the batches (0-based) each holding a NaN, by rank, and the resumed run's
# order, the same on both ranks: batch DEALT[s - 1] at step s
POISONED = {1: 5, 0: 9}
DEALT = [3, 0, 5, 1, 2, 4, 6, 9, 7, 8, 10, 11]


class Preempted(Exception):
    pass


def _preempted(signum, frame):
    raise Preempted(signum)


def main(log_dir: str, fault: str, resume: bool = False) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    signal.signal(signal.SIGTERM, _preempted)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    if fault == "own_comm_hook":          # the user's own hook (DDP takes one)
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        ddp.register_comm_hook(None, allreduce_hook)
    monitor = TrainMonitor(log_dir, stream=io.StringIO(), consistency_interval=5,
                           stop_exit_code=42, resume=resume)
    loader = _loader() if fault == "bad_sample_loader" else None
    optimizer = monitor.protect(torch.optim.AdamW(ddp.parameters(), lr=1e-2), model=ddp,
                                data=loader)
    generator = torch.Generator().manual_seed(100 + rank)       # each rank its own data
    batches = iter(loader) if loader is not None else None
    if fault == "bad_batches_dealt":
        batches = iter(dealt(rank, resume))
    for step in range(1, STEPS + 1):
        if fault == "signal_rank1" and rank == 1 and step == SIGNAL_STEP:
            os.kill(os.getpid(), signal.SIGTERM)
        if batches is not None:
            x, y = next(batches)
        else:
            x = torch.randn(16, 8, generator=generator)
            y = x[:, :1] + torch.randn(16, 1, generator=generator)
        if fault == "bad_batch_rank1" and rank == 1 and step == 6:
            x[3, 2] = float("nan")
        calls = []

        def loss_of(x=x, y=y, step=step, calls=calls):
            loss = nn.functional.mse_loss(ddp(x), y)
            calls.append(step)
            bad = fault == f"nan_rank{rank}" or (fault == "transient_rank1" and rank == 1
                                                 and len(calls) == 1)
            return loss * float("nan") if bad and step == 6 else loss
        monitor.backward(loss_of)
        optimizer.step()
        optimizer.zero_grad()
        if fault == "replica_rank1" and rank == 1 and step == 4:
            with torch.no_grad():
                model[0].weight[0, 0] += 1e-3
        monitor.observe(step=step)
        if monitor.stop_requested:
            break
    torch.save({name: p.detach() for name, p in model.named_parameters()},
               f"{log_dir}/weights_rank{rank}.pt")
    dist.destroy_process_group()
    try:
        monitor.close()
    except SystemExit as exit:
        _said(log_dir, rank, str(exit.code))
        raise
    except Preempted:
        _said(log_dir, rank, "preempted")
        raise SystemExit(128 + signal.SIGTERM) from None


def fixed_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``bad_batches_dealt``'s: rank ``rank``'s 12 batches (x, y), its POISONED one a NaN."""
    generator = torch.Generator().manual_seed(100 + rank)
    found = []
    for _ in range(STEPS):
        x = torch.randn(16, 8, generator=generator)
        found.append((x, x[:, :1] + torch.randn(16, 1, generator=generator)))
    found[POISONED[rank]][0][3, 2] = float("nan")
    return found


def dealt(rank: int, again: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The batches in order; ``again``: in the order DEALT, each one's rows shuffled."""
    batches = fixed_batches(rank)
    if not again:
        return batches
    generator = torch.Generator().manual_seed(5)
    shuffled = []
    for index in DEALT:
        x, y = batches[index]
        rows = torch.randperm(len(x), generator=generator)
        shuffled.append((x[rows], y[rows]))
    return shuffled


def _loader() -> torch.utils.data.DataLoader:
    """Each rank's share of 2 x 16 x STEPS samples, 16 a step, sample BAD_SAMPLE a NaN."""
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(2 * 16 * STEPS, 8, generator=generator)
    y = x[:, :1] + torch.randn(len(x), 1, generator=generator)
    x[BAD_SAMPLE, 2] = float("nan")
    data = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.distributed.DistributedSampler(data, shuffle=True, seed=0)
    return torch.utils.data.DataLoader(data, batch_size=16, sampler=sampler)


def _said(log_dir: str, rank: int, status: str) -> None:
    with open(f"{log_dir}/exit_rank{rank}", "w") as out:
        out.write(status)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:] == ["resume"])
