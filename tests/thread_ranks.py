"""Several ranks in one process, for the core's multi-rank parts: one Monitor per thread, their
exchange a real SUM over the threads' vectors (what the framework's all-reduce computes),
met at a barrier as a collective meets. Real Monitors, real files; only the transport is
not a framework's."""
from __future__ import annotations

import dataclasses
import threading

import numpy as np

from mindwatch import FrameworkHooks, Monitor
from mindwatch.ranks.consensus import consensus_of


class ThreadAllReduce:
    def __init__(self, world_size: int, timeout_s: float = 30.0):
        self.world_size = world_size
        self._barrier = threading.Barrier(world_size, timeout=timeout_s)
        self._vectors: list[np.ndarray | None] = [None] * world_size
        self._total: np.ndarray | None = None

    def reduce_sum(self, rank: int):
        def reduce(vector: np.ndarray) -> np.ndarray:
            self._vectors[rank] = np.asarray(vector, np.float32)
            if self._barrier.wait() == 0:
                self._total = np.sum(np.stack(self._vectors), axis=0, dtype=np.float32)
            self._barrier.wait()
            total = self._total
            self._barrier.wait()          # every rank has read it before the next overwrites
            return total.copy()
        return reduce


def hooks(reduce: ThreadAllReduce, rank: int, hosts: dict[int, str] | None = None
          ) -> FrameworkHooks:
    """FrameworkHooks whose consensus exchanges through ``reduce``; ``hosts``: each rank's host
    name (default: this machine's), as ``places`` would find it."""
    def consensus(world_size, notice, peers):
        from mindwatch.basics.rank import RankInfo
        found = consensus_of(RankInfo(rank=rank, world_size=world_size, local_rank=rank),
                             world_size, lambda: reduce.reduce_sum(rank), peers, notice,
                             "no reduce", on_device=True)
        if hosts is not None and found is not None:
            peers.places = {r: (hosts[r], r) for r in range(world_size)}
        return found
    return FrameworkHooks(consensus=consensus)


def run_ranks(world_size: int, body, *, log_dir: str, hosts=None, framework=None,
              **settings):
    """``body(monitor, rank)`` on every rank, each in its own thread with its own Monitor;
    ``framework(rank)``: more FrameworkHooks fields of a rank (a checkpoint saver, ...).
    Returns each rank's result (an exception re-raised)."""
    reduce = ThreadAllReduce(world_size)
    results: list = [None] * world_size
    errors: list = []

    def one(rank: int) -> None:
        try:
            framework_hooks = hooks(reduce, rank, hosts)
            if framework is not None:
                framework_hooks = dataclasses.replace(framework_hooks, **framework(rank))
            monitor = Monitor(log_dir, rank=rank, world_size=world_size, local_rank=rank,
                              framework=framework_hooks, **settings)
            results[rank] = body(monitor, rank)
        except BaseException as exc:
            errors.append(exc)
            reduce._barrier.abort()

    threads = [threading.Thread(target=one, args=(r,)) for r in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results
