"""What this rank decides together with the others after each step: whether to stop (its own
wish as a number for the exchange, and the stops the others asked for) and whether to
rewind. The exchange itself is the adapter's collective; this part only says what this rank
wants and acts on what every rank said."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import records
from ..anomaly import PEER_STOP, Anomaly
from ..decisions.actions import Actions
from ..pipeline.segment import CurrentSegment
from ..pipeline.writer import RecordWriter
from ..records import Rewind
from ..recovery.rewinding import RewindEvent, RewindGuard, RewindWish
from ..recovery.skipping import SkipGuard
from .peers import Peers, stop_code

if TYPE_CHECKING:
    import numpy as np


class RankDecisions:
    def __init__(self, *, current: CurrentSegment, peers: Peers, rewinds: RewindGuard,
                 skips: SkipGuard, actions: Actions, writer: RecordWriter):
        self._current, self._peers, self._rewinds = current, peers, rewinds
        self._skips, self._actions, self._writer = skips, actions, writer

    def stop_code(self) -> int:
        """This rank's own wish to stop, as a number to share with the other ranks (0 when
        it goes on, or when it stops only because another rank does)."""
        stop = self._current.segment.stop_requested
        if stop is None or stop.kind == PEER_STOP:
            return 0
        return stop_code(stop.kind)

    def observe_peers(self, *, step: int, stop_codes: Sequence[int] | np.ndarray,
                      data_times: Sequence[float] | np.ndarray,
                      step_time_s: float | None = None,
                      middles: np.ndarray | None = None) -> list[Anomaly]:
        """What the other ranks said after ``step``: stops to follow, stragglers."""
        found = self._peers.findings(
            step=step, stop_codes=stop_codes, data_times=data_times, step_time_s=step_time_s,
            stopping=self._current.segment.stop_requested is not None, middles=middles)
        self._actions.act(found)
        return found

    def settle_rewind(self, *, step: int, wishes: Sequence[RewindWish] | None = None,
                      touched: bool | None = None) -> RewindEvent | None:
        """Carry out this step's rewind, or take a snapshot that is due.

        Args:
            step: the step just observed.
            wishes: every rank's ``rewinds.wish`` of this step (None: this rank's alone).
            touched: whether an anomaly of the training state touched this step on any
                rank (None: this rank's ``rewinds.touched``); no snapshot is taken of it.

        Returns the rewind carried out, after its ``rewind`` record is written, or None.
        """
        guard = self._rewinds
        if wishes is None:
            wishes = [guard.wish] if guard.wish is not None else []
        event, held = guard.settle(step, wishes, guard.touched if touched is None else touched,
                                   stopping=self._current.segment.stop_requested is not None)
        self._actions.act(held)
        if event is not None:
            self._writer.emit(records.REWIND, {
                Rewind.STEP: event.step, Rewind.TO_STEP: event.to_step,
                Rewind.ANOMALY: event.anomaly, Rewind.REWINDS: event.rewinds,
                Rewind.ORIGIN_RANK: event.origin_rank})
            self._skips.refresh()          # the spike windows went back too
        for problem in guard.pop_problems():
            self._actions.notice(problem)
        return event
