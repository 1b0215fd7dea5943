"""What the ranks settle together after each step, through the adapter's collectives: every
step, the stops, rewinds and data times (consensus.py); every ``consistency_interval`` steps,
the replicas' fingerprints, which replicas.py compares.

Every rank calls ``after_step`` once per step end (``Monitor.end_step``, which every adapter
and trainer calls), so the collectives always pair up, and every rank decides alike from the
same exchanged numbers. The framework hands in, through ``FrameworkHooks``, its consensus
(None: a single rank, or no initialised communication) and a fingerprinter of its training
state (``names`` and ``vector()``: two float32 numbers per tensor).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..anomaly import Anomaly
from ..records import Hardware
from .consensus import RankConsensus

if TYPE_CHECKING:
    import numpy as np

    from ..monitor import Monitor


class Fingerprinter(Protocol):
    @property
    def names(self) -> Sequence[str]: ...

    def vector(self) -> np.ndarray: ...


class RankSync:
    def __init__(self, monitor: Monitor,
                 fingerprinter: Callable[[Any], Fingerprinter] | None):
        self.monitor = monitor
        self._make_fingerprinter = fingerprinter
        self._consensus: RankConsensus | None = None
        self._fingerprinter: Fingerprinter | None = None
        self._fingerprinted: Any = None         # the state the fingerprinter reads
        self._checked_at = 0            # the last step whose fingerprints were compared
        # every rank's job row of the latest exchange (job/fields.py), for the job log
        self.job_rows: np.ndarray | None = None
        # the cause each rank is slow by, as of the latest exchange (its straggler rule's
        # judgement of the step before): 0 none, else 1 + its index in slow_cause.CAUSES
        self.slow: np.ndarray | None = None

    def begin(self, step: int, consensus: Callable[[], RankConsensus | None]) -> None:
        """At train begin (``step``: the step training resumes after); ``consensus`` builds
        the ranks' consensus, once, when there are several."""
        self._checked_at = step
        if self.monitor.world_size > 1 and self._consensus is None:
            self._consensus = consensus()

    @property
    def exchanging(self) -> bool:
        """The ranks exchange after each step (several, with a consensus)."""
        return self._consensus is not None

    def after_step(self, step: int, *, data_time_s: float | None, step_time_s: float | None,
                   state: Any, job_row: np.ndarray | None = None,
                   work_time_s: float | None = None) -> list[Anomaly]:
        """``state``: what the fingerprinter reads (a train cell, a model and optimizer);
        ``job_row``: this rank's row for the job log, exchanged with the rest (``job_rows``);
        ``work_time_s``: this rank's own work before the step's collective, as its adapter
        measures it (None: unknown; detectors/slow_cause.py).
        Returns the anomalies the exchange found (another rank's stop, a straggler, a replica
        that differs): a custom loop stops on them as on its own."""
        monitor, rewinds = self.monitor, self.monitor.rewinds
        if self._consensus is None:
            monitor.settle_rewind(step=step)
            return []
        data_time = data_time_s or 0.0
        # this rank's straggler window's middle values travel with it: each rank sorts only
        # its own window, and the rule reads one median per rank
        straggler = monitor.peers.straggler
        middle = straggler.share(data_time)
        work = straggler.cause.share(work_time_s, self._cpu_wait())
        shared = self._consensus.exchange(step, monitor.stop_code(), data_time, rewinds.wish,
                                          rewinds.touched, job_row, middle, work=work,
                                          slow=straggler.slow_code)
        self.job_rows, self.slow = shared.job_rows, shared.slow
        if shared.work is not None and shared.waits is not None:
            monitor.peers.shared_work = (shared.work, shared.waits, shared.slow)
        found = monitor.observe_peers(step=step, stop_codes=shared.stop_codes,
                                      data_times=shared.data_times, step_time_s=step_time_s,
                                      middles=shared.middles)
        monitor.settle_rewind(step=step, wishes=shared.rewind_wishes, touched=shared.touched)
        interval = monitor.settings.consistency_interval
        # a crossing, not a multiple: in sink mode the step jumps by the sink size
        if interval and state is not None and \
                step // interval > self._checked_at // interval:
            self._checked_at = step
            found += self._compare_replicas(step, state)
        return found

    def _cpu_wait(self) -> float | None:
        """The seconds per second this process's threads waited for a CPU, from the hardware
        sampler's latest sample (hardware/cpu_share.py): no /proc read on the step's path.
        None without a sampler or on a host that does not tell."""
        sample, interval = self.monitor.responder.hardware, \
            self.monitor.settings.hardware_interval_s
        waited = None if sample is None else sample.get(Hardware.CPU_WAIT_S)
        return None if waited is None or not interval else float(waited) / interval

    def _compare_replicas(self, step: int, state: Any) -> list[Anomaly]:
        consensus = self._consensus
        if consensus is None or self._make_fingerprinter is None:
            return []
        if self._fingerprinter is None or self._fingerprinted is not state:
            self._fingerprinter = self._make_fingerprinter(state)
            self._fingerprinted = state
        fingerprinter = self._fingerprinter
        rows = consensus.gather(fingerprinter.vector())
        return self.monitor.replicas.observe(step=step, fingerprints=rows,
                                             names=fingerprinter.names)
