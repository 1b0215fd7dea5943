"""The job's part of the monitor (composed in ``Monitor``): every rank's row of the ranks'
exchange, and on rank 0 the job log (job_log.py), fed by the core's step-end protocol
(``Monitor.end_step``) and nowhere else.

A job log is written when there are several ranks and they exchange (a consensus: the
framework's communication is initialised); one rank's run is its rank log alone.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..anomaly import PEER_STOP, Anomaly
from ..basics.clock import Clock
from ..job_schema import JobEnd, JobStep
from ..runlog import read_rank_log
from ..runlog.goodput import LOST_S, PRODUCTIVE_S, SHARE, STRAGGLER, WALL_S, goodput
from . import fields as job_fields
from .job_log import JobLog

if TYPE_CHECKING:
    import numpy as np

    from .events import Places


_DATA = job_fields.NAMES.index(JobStep.DATA_TIME_S)     # its column in a row


class Job:
    def __init__(self, *, rank: int, world_size: int, log_dir: str, log_path: str,
                 device: int | None, clock: Clock, resume: bool,
                 notice: Callable[[str], None]):
        self.rank, self._device, self._log_path = rank, device, log_path
        # rank 0 of several: refuses an existing job log now, before training (resume off)
        self.log = JobLog(log_dir, clock=clock, resume=resume, notice=notice) \
            if rank == 0 and world_size > 1 else None
        self._late: list[str] = []          # kinds found after the last exchange
        self._run: dict[str, Any] = {}
        self._data_sums: np.ndarray | None = None      # each rank's data time, summed (s)
        self._open = False

    def started(self, run: Mapping[str, Any]) -> None:
        """The segment's ``run`` fields (rank 0's), for the job's ``run`` record."""
        self._run = dict(run)

    def begin(self, places: Places, world_size: int) -> None:
        """The ranks exchange from now on (``places``: every rank's host and device)."""
        if self.log is not None and not self._open:
            self._open = True
            self.log.begin(self._run, places, world_size)

    def row(self, step: Mapping[str, Any] | None, hardware: Mapping[str, Any] | None,
            found: Sequence[Anomaly]) -> np.ndarray:
        """This rank's row of the step's exchange."""
        late, self._late = self._late, []
        return job_fields.row(step, job_fields.memory_mb(hardware, self._device),
                              (a.kind for a in found), late)

    def step(self, step: int, rows: np.ndarray | None, found: Sequence[Anomaly],
             after: Sequence[Anomaly], slow: np.ndarray | None = None) -> None:
        """After ``step``'s exchange: ``found``, this rank's anomalies before it; ``after``,
        those the exchange brought (told to rank 0 in the next exchange); ``slow``, the
        cause each rank is slow by now (ranks/consensus.py ``Exchange.slow``)."""
        self._late = [a.kind for a in after if a.kind != PEER_STOP]
        if self.log is None or rows is None or not self._open:
            return
        import numpy as np

        data = rows[:, _DATA]
        known = job_fields.known_mask(rows)[:, _DATA] & np.isfinite(data)
        added = np.where(known, data, 0.0).astype(np.float64)
        self._data_sums = added if self._data_sums is None or \
            self._data_sums.shape != added.shape else self._data_sums + added
        self.log.step(step, rows, [*found, *after], slow)

    def hang(self, fields: Mapping[str, Any]) -> None:
        """The job's answer to a hang (job/holders.py), from the hang watchdog's thread: a
        ``hang`` record, once the job log is open (the ranks exchange)."""
        if self.log is not None and self._open:
            self.log.hang(fields)

    def end(self, end: Mapping[str, Any]) -> None:
        """The segment's end (rank 0's ``end`` fields): the job's ``end`` record with its
        goodput, from rank 0's log (every rank loses the same time together) and the
        ranks' summed data times (the time the others waited for the slowest)."""
        if self.log is None or not self._open:
            return
        self._open = False
        self.log.end({key: end.get(key) for key in (*JobEnd.REQUIRED, *JobEnd.OPTIONAL)
                      if key in end}, self._goodput())

    def _goodput(self) -> dict[str, Any] | None:
        try:
            figures = goodput([read_rank_log(self._log_path, self.rank).scan])
        except Exception:       # a view of the log; the end record is written regardless
            return None
        if figures is not None and self._data_sums is not None and len(self._data_sums) > 1:
            import numpy as np

            sums = np.sort(self._data_sums)
            waited = float(sums[-1] - sums[(len(sums) - 1) // 2])   # the lower median
            figures[LOST_S][STRAGGLER] = round(waited, 6)
            lost = sum(figures[LOST_S].values())
            figures[PRODUCTIVE_S] = round(max(0.0, figures[WALL_S] - lost), 6)
            figures[SHARE] = round(figures[PRODUCTIVE_S] / figures[WALL_S], 6)
        return figures
