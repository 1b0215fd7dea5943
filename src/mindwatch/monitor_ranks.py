"""The monitor's decisions shared with the other ranks (stops, stragglers, rewinds) and the
stops that are not anomalies (a signal, a failing sink under ``"raise"``). Part of
``Monitor`` (a mixin). The exchange itself is the adapter's collective; these methods only
say what this rank wants and act on what every rank said."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import records
from .anomaly import PEER_STOP, SIGNAL_STOP, SINK_ERROR, USER_STOP, Anomaly
from .peers import stop_code
from .records import Rewind
from .rewinding import RewindEvent, RewindWish
from .signals import signal_name

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .peers import Peers
    from .policy import Policy
    from .responder import Responder
    from .rewinding import RewindGuard
    from .segment import RunSegment
    from .signals import SignalStop
    from .skipping import SkipGuard
    from .writer import RecordWriter


class RankDecisions:
    """Stops and rewinds every rank takes together, and the stops that are not anomalies."""

    if TYPE_CHECKING:       # provided by Monitor
        peers: Peers
        policy: Policy
        responder: Responder
        rewinds: RewindGuard
        skips: SkipGuard
        _segment: RunSegment
        _writer: RecordWriter
        _signals: SignalStop

        def notice(self, message: str, **fields: Any) -> None: ...
        def _act(self, found: list[Anomaly]) -> None: ...
        def _emit(self, kind: str, fields: Mapping[str, Any],
                  time: float | None = None) -> None: ...
        def _say_responder_problems(self) -> None: ...

    def stop_code(self) -> int:
        """This rank's own wish to stop, as a number to share with the other ranks (0 when
        it goes on, or when it stops only because another rank does)."""
        stop = self._segment.stop_requested
        if stop is None or stop.kind == PEER_STOP:
            return 0
        return stop_code(stop.kind)

    def request_stop(self) -> None:
        """The user (or another callback) asked to stop: every rank stops after this step."""
        segment = self._segment
        if segment.stop_requested is None:
            segment.stop_requested = Anomaly(USER_STOP, segment.last_step or None, None, None,
                                             "stop requested by the user", actions=["stop"])

    def observe_peers(self, *, step: int, stop_codes: list[int], data_times: list[float],
                      step_time_s: float | None = None) -> list[Anomaly]:
        """What the other ranks said after ``step``: stops to follow, stragglers."""
        found = self.peers.findings(step=step, stop_codes=stop_codes, data_times=data_times,
                                    step_time_s=step_time_s,
                                    stopping=self._segment.stop_requested is not None)
        self._act(found)
        return found

    def settle_rewind(self, *, step: int, wishes: Sequence[RewindWish] | None = None,
                      touched: bool | None = None) -> RewindEvent | None:
        """After ``observe`` (and, on several ranks, after the exchange): carry out this
        step's rewind or take a snapshot that is due (on_anomaly "rewind"; otherwise a no-op).

        Args:
            step: the step just observed.
            wishes: every rank's ``rewinds.wish`` of this step (None: this rank's alone).
            touched: whether an anomaly of the training state touched this step on any
                rank (None: this rank's ``rewinds.touched``); no snapshot is taken of it.

        Returns the rewind carried out, after its ``rewind`` record is written, or None.
        """
        guard = self.rewinds
        if wishes is None:
            wishes = [guard.wish] if guard.wish is not None else []
        event, held = guard.settle(step, wishes, guard.touched if touched is None else touched,
                                   stopping=self._segment.stop_requested is not None)
        self._act(held)
        if event is not None:
            self._emit(records.REWIND, {
                Rewind.STEP: event.step, Rewind.TO_STEP: event.to_step,
                Rewind.ANOMALY: event.anomaly, Rewind.REWINDS: event.rewinds,
                Rewind.ORIGIN_RANK: event.origin_rank})
            self.skips.refresh()           # the spike windows went back too
        for problem in guard.pop_problems():
            self.notice(problem)
        return event

    def _check_signal(self) -> None:
        """A SIGTERM/SIGINT received since the last check: checkpoint (``on_signal``), then
        stop this segment after the current step; the other ranks learn it through the stop
        code, as for an anomaly."""
        segment = self._segment
        signum = self._signals.received
        if signum is None or segment.signal is not None:
            return
        segment.signal = signum
        step = segment.last_step
        actions = self.policy.actions_for(SIGNAL_STOP)
        checkpoint = (self.responder.checkpoint(step, "signal")
                      if "checkpoint" in actions and step else None)
        message = (f"{signal_name(signum)} received: training stops after step {step} on "
                   "every rank" + (f"; checkpoint {checkpoint}" if checkpoint else ""))
        if segment.stop_requested is None:
            segment.stop_requested = Anomaly(SIGNAL_STOP, step or None, float(signum), None,
                                             message, actions=actions, checkpoint=checkpoint)
        self.notice(message, source=SIGNAL_STOP)
        self._say_responder_problems()

    def _check_sink_error(self) -> None:
        """Under ``on_sink_error="raise"``: the first sink failure stops this segment (every
        rank, after this step) and raises ``SinkError`` to the training loop, once."""
        segment = self._segment
        error = self._writer.error
        if error is None or segment.sink_error is not None:
            return
        segment.sink_error = str(error)
        if segment.stop_requested is None:
            segment.stop_requested = Anomaly(SINK_ERROR, segment.last_step or None, None, None,
                                             str(error), actions=["stop"])
        raise error
