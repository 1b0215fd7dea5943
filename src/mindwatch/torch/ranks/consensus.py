"""The ranks' consensus (mindwatch/ranks/consensus.py) through ``torch.distributed``: one
SUM all-reduce on the default group, on the device its backend needs."""
from __future__ import annotations

import socket
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from ...ranks.consensus import RankConsensus
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
    """The consensus of this job's ranks, with ``peers.places`` filled in; None, said once
    through ``notice``, when ``torch.distributed`` is not initialised (each rank then stops
    alone)."""
    rank = current_rank()
    if initialised() and rank.world_size == world_size:
        consensus = RankConsensus(rank.rank, rank.world_size, torch_reduce_sum())
        peers.places = consensus.places(socket.gethostname(), rank.local_rank)
        return consensus
    notice(f"{world_size} ranks but torch.distributed is not initialised "
           "(torch.distributed.init_process_group()): each rank stops on its own anomalies "
           "only, and stragglers are not detected")
    return None
