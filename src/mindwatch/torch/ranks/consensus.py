"""The ranks' consensus (mindwatch/ranks/consensus.py) through ``torch.distributed``: one
SUM all-reduce on the default group, on the device its backend needs."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from ...ranks.consensus import RankConsensus, consensus_of
from ...ranks.peers import Peers
from .distributed import collective_device, current_rank, initialised


def torch_reduce_sum() -> Callable[[np.ndarray], np.ndarray]:
    device = collective_device()

    def reduce(vector: np.ndarray) -> np.ndarray:
        tensor = torch.from_numpy(np.ascontiguousarray(vector, np.float32)).to(device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.cpu().numpy()

    return reduce


def consensus_for(world_size: int, notice: Callable[[str], None],
                  peers: Peers) -> RankConsensus | None:
    """The consensus of this job's ranks (``ranks.consensus.consensus_of``)."""
    return consensus_of(current_rank(), world_size,
                        torch_reduce_sum if initialised() else None, peers, notice,
                        "torch.distributed is not initialised "
                        "(torch.distributed.init_process_group())",
                        on_device=on_a_device())


def on_a_device() -> bool:
    """Whether this process trains on an accelerator (CUDA, or Ascend through torch_npu),
    whose index its local rank is."""
    npu = getattr(torch, "npu", None)
    return torch.cuda.is_available() or bool(npu is not None and npu.is_available())
