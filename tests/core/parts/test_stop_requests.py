"""StopRequests alone: a user's stop, a real signal, a sink that fails under "raise"."""
import os
import signal

import pytest
from parts_kit import Kit

from mindwatch import SinkError
from mindwatch.anomaly import GRADIENT_NONFINITE, Anomaly
from mindwatch.decisions.signals import SignalStop
from mindwatch.decisions.stops import StopRequests
from mindwatch.sinks.base import Sink


def _stops(kit, **kwargs):
    return StopRequests(policy=kit.policy, **kit.parts(), **kwargs)


def test_a_user_stop_is_the_stop_request_unless_an_anomaly_came_first(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    kit.segment.last_step = 4
    stops = _stops(kit)
    stops.request_stop()
    request = kit.segment.stop_requested
    assert (request.kind, request.step, request.actions) == ("user_request", 4, ["stop"])
    kit.current.begin(clock.perf_counter())           # a new segment starts clean
    anomaly = Anomaly(GRADIENT_NONFINITE, 1, None, None, "nan", actions=["stop"])
    kit.segment.stop_requested = anomaly
    stops.request_stop()
    assert kit.segment.stop_requested is anomaly


def test_a_real_signal_checkpoints_and_stops_after_the_step(tmp_path, clock):
    saved = []
    kit = Kit(tmp_path, clock, save_checkpoint=lambda step, reason: saved.append(
        (step, reason)) or f"{tmp_path}/{reason}{step}.ckpt")
    kit.segment.last_step = 9
    calls = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: calls.append(signum))
    try:
        stops = _stops(kit, signals=SignalStop((signal.SIGUSR1,)))
        assert stops.install_signals()
        os.kill(os.getpid(), signal.SIGUSR1)
        stops.check_signal()
        stops.check_signal()                          # acted on once
        request = kit.segment.stop_requested
        assert request.kind == "signal" and request.step == 9 and saved == [(9, "signal")]
        [notice] = kit.sink.of_kind("notice")
        assert notice["message"].startswith("SIGUSR1 received: training stops after step 9")
        assert calls == []
        stops.finish()                                # the signal's usual course: ours
        assert calls == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


class _Failing(Sink):
    def write(self, record):
        if record["kind"] == "step":
            raise OSError(5, "Input/output error")


def test_a_failing_sink_under_raise_stops_and_raises_once(tmp_path, clock):
    kit = Kit(tmp_path, clock, on_sink_error="raise", sinks=[_Failing()])
    stops = _stops(kit)
    stops.check_sink_error()                          # nothing failed yet
    kit.writer.emit("step", {"step": 1})
    with pytest.raises(SinkError, match="Input/output error"):
        stops.check_sink_error()
    stops.check_sink_error()
    assert kit.segment.stop_requested.kind == "sink_error"
