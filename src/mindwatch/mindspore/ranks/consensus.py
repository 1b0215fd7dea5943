"""The ranks' consensus (mindwatch/ranks/consensus.py) through MindSpore's collective: one SUM
AllReduce in a Cell compiled with ``jit``, because PyNative collectives fail on the CPU (and
MindSpore's CPU AllReduce has no MAX).
"""
from __future__ import annotations

import socket
from collections.abc import Callable

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from ...ranks.consensus import RankConsensus
from ...ranks.peers import Peers
from .distributed import communication_initialised, current_rank


class _SumAllReduce(nn.Cell):
    def __init__(self):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM)

    @ms.jit
    def construct(self, vector):
        return self.all_reduce(vector)


def mindspore_reduce_sum() -> Callable[[np.ndarray], np.ndarray]:
    reduce = _SumAllReduce()
    return lambda vector: reduce(ms.Tensor(vector)).asnumpy()


def consensus_for(world_size: int, notice: Callable[[str], None],
                  peers: Peers) -> RankConsensus | None:
    """The consensus of this job's ``world_size`` ranks, with ``peers.places`` filled in;
    None, said once through ``notice``, when MindSpore's communication is not initialised
    (each rank then stops alone)."""
    rank = current_rank()
    if rank.world_size == world_size and communication_initialised():
        consensus = RankConsensus(rank.rank, rank.world_size, mindspore_reduce_sum())
        peers.places = consensus.places(socket.gethostname(), rank.local_rank)
        return consensus
    notice(f"{world_size} ranks but MindSpore communication is not initialised "
           "(mindspore.communication.init()): each rank stops on its own anomalies only, and "
           "stragglers are not detected")
    return None
