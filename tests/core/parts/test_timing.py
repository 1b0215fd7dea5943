"""StepTiming and Eta alone, on a fake clock: a step's times and rates, and the time left,
which a one-off cost does not move and a recurring one is spread over."""
from random import Random

import pytest

from mindwatch.observation import StepObservation
from mindwatch.pipeline.eta import WINDOW as ETA_WINDOW
from mindwatch.pipeline.eta import Eta
from mindwatch.pipeline.segment import RunSegment
from mindwatch.pipeline.throughput import Throughput
from mindwatch.pipeline.timing import StepTiming

PACE = 0.02           # s per step


def _run(total, cost_at, pace=PACE):
    """Every step's ETA and the true time left, on a run of ``total`` steps of ``pace``
    seconds, plus ``cost_at(step)`` seconds spent before the step ends."""
    eta, now, ends, etas = Eta(), 0.0, {}, {}
    eta.begin(total_steps=total)
    for step in range(1, total + 1):
        now += pace + cost_at(step)
        ends[step], etas[step] = now, eta.update(step, now)
    return etas, {step: ends[total] - ends[step] for step in ends}


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


def test_a_one_off_compilation_does_not_swing_the_eta():
    """The issue's run: 200 steps of 20 ms, the first state step's graph compiled in 0.5 s at
    step 100. The ETA there is the 100 steps left, not the compilation spread over them."""
    etas, left = _run(200, lambda step: 0.5 if step == 100 else 0.0)
    assert etas[99] == pytest.approx(101 * PACE)            # the compilation is yet to come
    assert etas[100] == pytest.approx(left[100]) == pytest.approx(100 * PACE)
    assert all(etas[s] == pytest.approx(left[s]) for s in range(101, 200))


def test_recurring_costs_are_spread_over_their_period():
    """An evaluation of 0.3 s every 50 steps (the first with its compilation, 0.45 s), and
    state steps every 100 steps 15 ms longer (their first compiled in 0.5 s): within 10% from
    mid-run to a quarter before the end."""
    def cost(step):
        evaluation = (0.45 if step == 51 else 0.3) if step % 50 == 1 and step > 1 else 0.0
        state = (0.5 if step == 100 else 0.015) if step % 100 == 0 else 0.0
        return evaluation + state
    etas, left = _run(400, cost)
    for step in range(200, 301, 7):            # mid-run to a quarter before the end
        assert etas[step] == pytest.approx(left[step], rel=0.1), step
    # seen once or twice, an evaluation is not yet expected again (no period yet)
    assert etas[51] == pytest.approx(349 * PACE, rel=0.01)
    assert etas[101] == pytest.approx(299 * PACE, rel=0.01)
    # from the third on, every 50 steps
    assert etas[151] == pytest.approx(left[151], rel=0.1)


def test_a_stall_over_a_few_steps_and_a_cost_that_stops_recurring_add_nothing():
    """Three slow steps in a row (a stall of 3 x 0.1 s), twice, 60 steps apart: costs at no
    period but one; a cost seen three times 20 steps apart, then gone for two periods:
    nothing."""
    stalls = {101, 102, 103, 161, 162, 163}
    etas, _ = _run(600, lambda step: 0.1 if step in stalls else 0.0)
    assert etas[104] == pytest.approx(496 * PACE, rel=0.01)
    assert etas[164] == pytest.approx(436 * PACE, rel=0.01)
    etas, _ = _run(600, lambda step: 0.2 if step in (100, 120, 140) else 0.0)
    # at its phase: at 160, 180, ..., 600
    assert etas[150] == pytest.approx(450 * PACE + 23 * 0.2, rel=0.01)
    assert etas[181] == pytest.approx(419 * PACE, rel=0.01)


def test_a_slower_pace_is_followed_within_the_window():
    etas, left = _run(400, lambda step: 0.02 if step > 100 else 0.0)
    assert etas[100 + ETA_WINDOW] == pytest.approx(left[100 + ETA_WINDOW], rel=0.01)


def test_hiccups_of_a_loaded_host_at_no_period_are_part_of_the_pace():
    """Two steps in ten, at no period, 15 ms slower (another process took the CPU): 1.5 ms a
    step that no kind of cost recurs for. The ETA counts them from mid-run on (15% of the
    time left without them: within 10%); a one-off cost among them still moves nothing."""
    random = Random(3)
    slow = {step for step in range(1, 401) if random.random() < 0.2} - {200}
    etas, left = _run(400, lambda step: 0.015 if step in slow else 0.5 if step == 200 else 0.0)
    for step in range(150, 301, 10):        # (the one-off at step 200 is no one's to foresee)
        assert etas[step] == pytest.approx(left[step] - 0.5 * (step < 200), rel=0.1), step
    assert etas[200] == pytest.approx(etas[199] - 0.02 - 0.0015, rel=0.02)


def test_a_slower_pace_that_turns_the_median_is_not_averaged_with_the_old_one():
    """The jit loop's run on a loaded host: 39 steps of 25 ms, then its loader falls behind
    (63 ms a step). Once the slow steps are half the window, the median is theirs: the
    old pace's steps are no part of the new one."""
    etas, left = _run(70, lambda step: 0.038 if step >= 40 else 0.0, pace=0.025)
    for step in range(49, 70):
        assert etas[step] == pytest.approx(left[step], rel=0.01), step
