"""Every rank learns, after every step, whether any rank wants to stop and how long each rank
took to get its batch ready: one SUM all-reduce of a small float vector.

A stop decided on one rank must stop all ranks after the same step, or the others block in
their next collective until a timeout kills the job. Each rank writes only its own slots of
the vector (zeros elsewhere), so a SUM (the one reduction that works on every backend,
MindSpore's CPU included) gathers them all. The cell is compiled with ``jit`` because
PyNative collectives fail on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import mindspore as ms
import numpy as np
from mindspore import nn, ops


class _SumAllReduce(nn.Cell):
    def __init__(self):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM)

    @ms.jit
    def construct(self, vector):
        return self.all_reduce(vector)


@dataclass
class Exchange:
    stop_codes: list[int]        # per rank: 0, or 1 + the index of the kind that stops it
    data_times: list[float]      # per rank: seconds from the previous step's end to this start


class RankConsensus:
    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self._reduce = _SumAllReduce()

    def exchange(self, stop_code: int, data_time_s: float) -> Exchange:
        vector = np.zeros(2 * self.world_size, np.float32)
        vector[self.rank] = stop_code
        vector[self.world_size + self.rank] = data_time_s
        total = self._reduce(ms.Tensor(vector)).asnumpy()
        return Exchange(stop_codes=[round(v) for v in total[:self.world_size]],
                        data_times=[float(v) for v in total[self.world_size:]])
