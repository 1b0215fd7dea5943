"""One rank of a trainer's DDP job under torchrun (gloo, CPU), for test_ddp.py:
``torchrun --nproc_per_node=2 trainer_ddp.py PIPELINE LOG_DIR OUTPUT_DIR``, PIPELINE one of
torch_conformance's trainers ("HF Trainer", "Lightning"), run as the conformance matrix runs
it. Rank 1's loss is NaN at its ``BAD_STEP``-th training forward, rank 0's never is."""
import os
import sys

import torch

from torch_conformance import BAD_STEP, PIPELINES, SCENARIOS


def main(pipeline: str, log_dir: str, output_dir: str) -> None:
    rank = int(os.environ["RANK"])
    scenarios = {scenario.name: scenario for scenario in SCENARIOS}
    scenario = scenarios["nan_loss" if rank == 1 else "healthy"]
    callback, model = PIPELINES[pipeline](log_dir, scenario, output_dir, ranks=2)
    torch.save({name: p.detach() for name, p in model.named_parameters()},
               f"{log_dir}/weights_rank{rank}.pt")
    assert callback.monitor.last_step == BAD_STEP, callback.monitor.last_step


if __name__ == "__main__":
    main(*sys.argv[1:])
