"""The ranks' consensus (mindwatch/ranks/consensus.py) through MindSpore's collective: one SUM
AllReduce in a Cell compiled with ``jit``, because PyNative collectives fail on the CPU (and
MindSpore's CPU AllReduce has no MAX).
"""
from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from ...ranks.consensus import RankConsensus, consensus_of
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
    """The consensus of this job's ranks (``ranks.consensus.consensus_of``)."""
    return consensus_of(current_rank(), world_size,
                        mindspore_reduce_sum if communication_initialised() else None, peers,
                        notice, "MindSpore communication is not initialised "
                        "(mindspore.communication.init())",
                        on_device=ms.get_context("device_target") != "CPU")
