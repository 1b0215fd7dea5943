"""StepTiming and Eta alone, on a fake clock: a step's times and rates, and the time left."""
import pytest

from mindwatch.observation import StepObservation
from mindwatch.pipeline.segment import RunSegment
from mindwatch.pipeline.throughput import Throughput
from mindwatch.pipeline.timing import ETA_WINDOW, Eta, StepTiming


def test_the_eta_is_the_steps_left_times_the_recent_pace():
    eta = Eta()
    eta.begin(total_steps=100)
    assert eta.update(1, 10.0) is None              # one step end: no pace yet
    assert eta.update(2, 10.5) == pytest.approx(98 * 0.5)
    assert eta.update(4, 11.5) == pytest.approx(96 * 0.5)      # a sink of 2 steps
    for step in range(5, 5 + ETA_WINDOW):          # 50 steps at 0.2 s: the old pace is gone
        left = eta.update(step, 11.5 + 0.2 * (step - 4))
    assert left == pytest.approx((100 - 54) * 0.2)
    assert eta.update(100, 30.0) == 0.0


def test_no_eta_without_a_length_and_a_new_count_starts_over():
    eta = Eta()
    eta.begin(None)
    assert eta.update(1, 1.0) is None and eta.update(2, 2.0) is None
    eta.begin(10)
    assert eta.update(5, 3.0) is None and eta.update(6, 4.0) == pytest.approx(4.0)
    assert eta.update(3, 9.0) is None               # the count went back: no pace across it


def test_step_timing_fills_times_rates_and_the_segment_count(clock):
    timing = StepTiming(Throughput(tokens_per_sample=128, flops_per_token=None,
                                   peak_tflops=None), clock)
    timing.eta.begin(10)
    segment = RunSegment.begin(clock.perf_counter())
    observations = []
    for step in (1, 2, 3):
        clock.advance(0.5)
        obs = StepObservation(step=step)
        timing.fill(obs, segment, step_time_s=None, batch_size=4)
        observations.append(obs)
    last = observations[-1]
    assert last.step_time_s == pytest.approx(0.5) and last.samples_per_s == pytest.approx(8.0)
    assert last.tokens_per_s == pytest.approx(1024.0) and last.time == clock.time()
    assert [o.segment_step for o in observations] == [1, 2, 3] and segment.observed == 3
    assert [o.eta_s for o in observations] == [None, pytest.approx(4.0), pytest.approx(3.5)]
