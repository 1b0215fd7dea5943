"""The stops that are not anomalies: a user's ``request_stop()``, a SIGTERM/SIGINT, a failing
sink under ``on_sink_error="raise"``. Each becomes the segment's stop request, so the other
ranks learn of it through the stop code, exactly as of an anomaly."""
from __future__ import annotations

from ..anomaly import SIGNAL_STOP, SINK_ERROR, USER_STOP, Anomaly
from ..pipeline.segment import CurrentSegment
from ..pipeline.writer import RecordWriter
from ..policy import Policy
from .actions import Actions
from .responder import Responder
from .signals import SignalStop, signal_name


class StopRequests:
    """Owns the signal handlers (between ``install_signals`` and ``finish``)."""

    def __init__(self, *, current: CurrentSegment, policy: Policy, responder: Responder,
                 writer: RecordWriter, actions: Actions, signals: SignalStop | None = None):
        self._current, self._policy, self._responder = current, policy, responder
        self._writer, self._actions = writer, actions
        self._signals = signals or SignalStop()

    def request_stop(self) -> None:
        """The user (or another callback) asked to stop: every rank stops after this step."""
        segment = self._current.segment
        if segment.stop_requested is None:
            segment.stop_requested = Anomaly(USER_STOP, segment.last_step or None, None, None,
                                             "stop requested by the user", actions=["stop"])

    def install_signals(self) -> bool:
        """False when handlers cannot be installed (not the main thread)."""
        return self._signals.install()

    def finish(self) -> None:
        """The handlers removed; a signal received meanwhile takes its usual course now."""
        self._signals.finish()

    def check_signal(self) -> None:
        """A SIGTERM/SIGINT received since the last check: checkpoint (``on_signal``), then
        stop this segment after the current step."""
        segment = self._current.segment
        signum = self._signals.received
        if signum is None or segment.signal is not None:
            return
        segment.signal = signum
        step = segment.last_step
        actions = self._policy.actions_for(SIGNAL_STOP)
        checkpoint = (self._responder.checkpoint(step, "signal")
                      if "checkpoint" in actions and step else None)
        message = (f"{signal_name(signum)} received: training stops after step {step} on "
                   "every rank" + (f"; checkpoint {checkpoint}" if checkpoint else ""))
        if segment.stop_requested is None:
            segment.stop_requested = Anomaly(SIGNAL_STOP, step or None, float(signum), None,
                                             message, actions=actions, checkpoint=checkpoint)
        self._actions.notice(message, source=SIGNAL_STOP)
        self._actions.say_problems()

    def check_sink_error(self) -> None:
        """Under ``on_sink_error="raise"``: the first sink failure stops this segment (every
        rank, after this step) and raises ``SinkError`` to the training loop, once."""
        segment = self._current.segment
        error = self._writer.error
        if error is None or segment.sink_error is not None:
            return
        segment.sink_error = str(error)
        if segment.stop_requested is None:
            segment.stop_requested = Anomaly(SINK_ERROR, segment.last_step or None, None, None,
                                             str(error), actions=["stop"])
        raise error
