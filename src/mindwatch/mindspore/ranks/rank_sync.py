"""What the ranks settle together after each step, through MindSpore collectives: every step,
the stops, rewinds and data times (consensus.py); every ``consistency_interval`` steps, the
replicas' fingerprints (fingerprints.py), which the core compares (ranks/replicas.py).

Every rank calls ``after_step`` once per step end, so the collectives always pair up, and
every rank decides alike from the same exchanged numbers.
"""
from __future__ import annotations

from typing import Any

from ...monitor import Monitor
from .consensus import RankConsensus, consensus_for
from .fingerprints import Fingerprinter


class RankSync:
    def __init__(self, monitor: Monitor):
        self.monitor = monitor
        self._consensus: RankConsensus | None = None
        self._fingerprinter: Fingerprinter | None = None
        self._checked_at = 0            # the last step whose fingerprints were compared

    def begin(self, step: int) -> None:
        """At train begin (``step``: the step training resumes after)."""
        self._checked_at = step
        if self.monitor.world_size > 1 and self._consensus is None:
            self._consensus = consensus_for(self.monitor.world_size, self.monitor.notice,
                                            self.monitor.peers)

    def after_step(self, step: int, *, data_time_s: float | None, step_time_s: float | None,
                   train_cell: Any) -> None:
        monitor, rewinds = self.monitor, self.monitor.rewinds
        if self._consensus is None:
            monitor.settle_rewind(step=step)
            return
        shared = self._consensus.exchange(step, monitor.stop_code(), data_time_s or 0.0,
                                          rewinds.wish, rewinds.touched)
        monitor.observe_peers(step=step, stop_codes=shared.stop_codes,
                              data_times=shared.data_times, step_time_s=step_time_s)
        monitor.settle_rewind(step=step, wishes=shared.rewind_wishes, touched=shared.touched)
        interval = monitor.settings.consistency_interval
        # a crossing, not a multiple: in sink mode the step jumps by the sink size
        if interval and train_cell is not None and \
                step // interval > self._checked_at // interval:
            self._checked_at = step
            self._compare_replicas(step, train_cell)

    def _compare_replicas(self, step: int, train_cell: Any) -> None:
        consensus = self._consensus
        if consensus is None:
            return
        fingerprinter = self._fingerprinter
        if fingerprinter is None or fingerprinter.cell is not train_cell:
            fingerprinter = self._fingerprinter = Fingerprinter(train_cell)
        rows = consensus.gather(fingerprinter.vector())
        self.monitor.replicas.observe(step=step, fingerprints=rows, names=fingerprinter.names)
