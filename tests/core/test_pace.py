"""throughput_drop and data_bound, through the Monitor on a fake clock: exact values, where the
time went, on which ranks, and no alarm for one-off slow steps, withheld steps or warm-up."""
import io

import pytest

from mindwatch import Monitor
from mindwatch.detectors import DataBoundDetector, Pace, ThroughputDropDetector
from mindwatch.observation import StepObservation
from mindwatch.runlog import read_rank_log

WINDOW, WARMUP = 10, 5


def _monitor(tmp_path, clock, **settings):
    return Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                   pace_window=WINDOW, trend_warmup=WARMUP, **settings)


def _run(monitor, clock, steps, *, first=1, step_s=0.1, data_s=0.01, batch_size=None,
         skipped=()):
    """Steps ``first`` .. ``first + len(steps) - 1``; ``steps``: (step_s, data_s) overrides
    per step (None keeps the defaults). Returns every anomaly found."""
    found = []
    for offset, override in enumerate(steps):
        step = first + offset
        total, data = override if override is not None else (step_s, data_s)
        clock.advance(total)
        found += monitor.observe(step=step, loss=1.0, data_time_s=data, batch_size=batch_size,
                                 skipped=step in skipped)
    return found


def test_a_steady_run_with_one_off_slow_steps_raises_nothing(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    # the compilation (step 1: 30 s), a checkpoint save every 7 steps (2 s of data time), an
    # evaluation's long step, a state step: never half of a window
    steps = [None] * 200
    steps[0] = (30.0, 0.0)
    for i in range(10, 200, 7):
        steps[i] = (2.1, 2.0)
    steps[55], steps[56] = (8.0, 0.0), (0.12, 0.01)
    assert _run(monitor, clock, steps) == []
    monitor.close()


def test_compute_time_that_doubles_is_a_throughput_drop_on_this_rank(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    assert _run(monitor, clock, [None] * 40) == []
    found = _run(monitor, clock, [(0.3, 0.01)] * 10, first=41)
    [drop] = [a for a in found if a.kind == "throughput_drop"]
    # half of the window slow: its median (0.1 + 0.3) / 2 passes 1.5 x 0.1 s at step 45
    assert drop.step == 45 and drop.value == pytest.approx(0.2)
    assert drop.threshold == pytest.approx(0.15)
    assert drop.fields == {"cause": "compute", "ranks": [0]}
    assert "median step time over the last 10 steps is 200.0 ms, 2x the run's steady " \
           "100.0 ms" in drop.message
    # the slow steps' own compute time, not a median of a window still half fast
    assert "compute time (the train step itself) grew on rank 0: 90.0 ms -> 290.0 ms" \
        in drop.message
    monitor.close()
    [record] = read_rank_log(monitor.log_path).anomalies
    assert record["cause"] == "compute" and record["ranks"] == [0]
    assert record["value"] == pytest.approx(0.2) and record["threshold"] == pytest.approx(0.15)
    assert record["step"] == 45


def test_one_episode_then_it_rearms(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    _run(monitor, clock, [None] * 40)
    first = _run(monitor, clock, [(0.3, 0.01)] * 30, first=41)
    assert [a.kind for a in first] == ["throughput_drop"]
    assert _run(monitor, clock, [None] * 20, first=71) == []          # recovered
    again = _run(monitor, clock, [(0.3, 0.01)] * 20, first=91)
    assert [a.step for a in again] == [95]


def test_a_slower_input_pipeline_is_named_as_the_data_time(tmp_path, clock):
    monitor = _monitor(tmp_path, clock, data_bound_share=None)
    _run(monitor, clock, [None] * 40)
    [drop] = _run(monitor, clock, [(0.3, 0.21)] * 10, first=41)
    assert drop.kind == "throughput_drop" and drop.fields == {"cause": "data", "ranks": [0]}
    assert "data time (the input pipeline and other work outside the train step) grew on " \
           "rank 0: 10.0 ms -> 210.0 ms per step" in drop.message


def test_one_stalled_step_among_the_slow_ones_does_not_hide_the_data_time(tmp_path, clock):
    """Steps that wait for their batch (0.1 s -> 0.16 s, 60 ms of it data), and among them
    one step that a loaded host stalled for 0.8 s of compute: the mean of the six slow steps
    would say compute (167 ms of growth, 50 ms of it data); their median says data."""
    monitor = _monitor(tmp_path, clock, data_bound_share=None)
    _run(monitor, clock, [None] * 40)
    steps = [(0.16, 0.07)] * 10
    steps[1] = (0.8, 0.01)
    [drop] = _run(monitor, clock, steps, first=41)
    assert drop.step == 46 and drop.fields == {"cause": "data", "ranks": [0]}
    assert "grew on rank 0: 10.0 ms -> 70.0 ms per step" in drop.message


def test_the_baseline_is_the_steady_pace_after_the_warm_up(tmp_path, clock):
    """A run that gets slower by a little every step is judged against the pace it had, so
    the drift is found; a baseline that followed it would never fire."""
    monitor = _monitor(tmp_path, clock)
    found = _run(monitor, clock, [(0.1 * 1.01 ** i, 0.01) for i in range(100)])
    [drop] = found
    # the baseline is the median of the first five disjoint windows past the warm-up (steps
    # 6..55): the third, steps 26..35, median 0.1 x 1.01^29.5; the window's median passes
    # 1.5x that log(1.5) / log(1.01) = 40.7 steps later
    assert drop.step == 76
    assert drop.value / drop.threshold == pytest.approx(1.0, abs=0.011)


def test_withheld_steps_and_the_step_after_them_are_not_the_pace(tmp_path, clock):
    """A withheld update is computed again (replay): a run of them doubles the time of the
    steps after them, which is the fault's cost, not a slower run."""
    monitor = _monitor(tmp_path, clock)
    steps = [None] * 100
    withheld = set(range(41, 100, 2))
    for step in withheld:
        steps[step] = (0.3, 0.01)              # the step after each withheld one: its replay
    assert _run(monitor, clock, steps, skipped=withheld) == []


def test_below_the_users_throughput_baseline(tmp_path, clock):
    monitor = _monitor(tmp_path, clock, throughput_baseline=300.0)
    assert _run(monitor, clock, [None] * 40, batch_size=32) == []      # 320 samples/s
    [drop] = _run(monitor, clock, [(0.11, 0.01)] * 10, first=41, batch_size=32)
    assert drop.kind == "throughput_drop" and drop.step == 46        # 290.9 samples/s
    assert drop.value == pytest.approx(32 / 0.11) and drop.threshold == 300.0
    assert "below throughput_baseline 300" in drop.message


def test_data_bound_when_the_input_pipeline_takes_most_of_the_step(tmp_path, clock):
    monitor = _monitor(tmp_path, clock, throughput_drop_factor=10.0)
    assert _run(monitor, clock, [(0.1, 0.04)] * 40) == []             # 40%: fine
    [bound] = _run(monitor, clock, [(0.1, 0.08)] * 10, first=41)
    assert bound.kind == "data_bound" and bound.step == 45          # half the window
    assert bound.value == pytest.approx(0.6) and bound.threshold == 0.5
    assert bound.message.startswith("input-bound: 60% of each step is spent outside the "
                                    "train step (median data time 60.0 ms of 100.0 ms")


def test_millisecond_steps_are_not_judged(tmp_path, clock):
    """Noise of a loaded host doubles a 2 ms step; under 5 ms of growth nothing fires."""
    monitor = _monitor(tmp_path, clock)
    _run(monitor, clock, [(0.002, 0.0001)] * 40)
    assert _run(monitor, clock, [(0.006, 0.0035)] * 20, first=41) == []


def test_warm_up_and_each_new_segment_learn_the_pace_anew(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    # slow at the start (a cold cache), within the warm-up of 5: never the baseline
    assert _run(monitor, clock, [(1.0, 0.5)] * 5 + [None] * 40) == []
    monitor.close()
    monitor.start()                  # a second model.train: a larger batch, 3x the step
    assert _run(monitor, clock, [(0.3, 0.01)] * 60, first=46) == []
    monitor.close()


def test_ranks_whose_data_time_grew_are_named(tmp_path, clock):
    """Under data parallelism every rank's step slows with the slowest rank's input: rank 0
    waits inside the all-reduce (its own compute time grows) and names rank 1."""
    monitor = Monitor(str(tmp_path), rank=0, world_size=2, clock=clock, stream=io.StringIO(),
                      hardware_interval_s=None, pace_window=WINDOW, trend_warmup=WARMUP)
    found = []
    for step in range(1, 61):
        slow = step > 40
        clock.advance(0.3 if slow else 0.1)
        found += monitor.observe(step=step, loss=1.0, data_time_s=0.01)
        # judged once every rank's data time of the step is in: the exchange's findings
        found += monitor.observe_peers(step=step, stop_codes=[0, 0],
                                       data_times=[0.01, 0.21 if slow else 0.01])
    [drop] = [a for a in found if a.kind == "throughput_drop"]
    assert drop.step == 45
    assert drop.fields == {"cause": "data", "ranks": [1]}
    assert "grew: rank 1 10.0 ms -> 210.0 ms per step" in drop.message


def test_one_pace_is_fed_once_per_observation():
    pace = Pace(window=2, warmup=0)
    drop = ThroughputDropDetector(pace, factor=1.5, baseline=None)
    bound = DataBoundDetector(pace, share=0.5)
    for step in (1, 2):
        obs = StepObservation(step=step, step_time_s=0.1, data_time_s=0.02, segment_step=step)
        drop.update(obs), bound.update(obs)
    assert list(pace._steps) == [0.1, 0.1] and pace.ready and pace.data_s == 0.02


def test_a_faster_group_lowers_the_baseline_and_a_lucky_window_does_not(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    # steps 6..55 at 0.2 s but one window (16..25) at 0.1 s: the baseline is 0.2 s
    steps = [(0.2, 0.01)] * 55
    steps[15:25] = [(0.1, 0.01)] * 10
    assert _run(monitor, clock, steps) == []
    # a whole group faster (56..105 at 0.1 s): the baseline becomes 0.1 s, and 0.2 s is slow
    assert _run(monitor, clock, [None] * 50, first=56) == []
    [drop] = _run(monitor, clock, [(0.2, 0.01)] * 10, first=106)
    assert drop.step == 110 and drop.threshold == pytest.approx(0.15)


def test_a_median_hovering_at_the_limit_is_one_episode(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    _run(monitor, clock, [None] * 40)
    hovering = ([(0.17, 0.01)] * 10 + [(0.14, 0.01)] * 10) * 3      # 1.7x, then 1.4x, ...
    assert [a.kind for a in _run(monitor, clock, hovering, first=41)] == ["throughput_drop"]
    # back under halfway (1.25x) ends it; the next drop is a new episode
    _run(monitor, clock, [(0.11, 0.01)] * 20, first=101)
    assert len(_run(monitor, clock, [(0.17, 0.01)] * 10, first=121)) == 1


def test_a_data_share_hovering_at_the_limit_is_one_episode(tmp_path, clock):
    monitor = _monitor(tmp_path, clock, throughput_drop_factor=10.0)
    _run(monitor, clock, [(0.1, 0.02)] * 40)
    hovering = ([(0.1, 0.055)] * 10 + [(0.1, 0.045)] * 10) * 3
    assert [a.kind for a in _run(monitor, clock, hovering, first=41)] == ["data_bound"]


def test_a_slowdown_while_the_baseline_is_learned_does_not_become_it(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    _run(monitor, clock, [None] * 25)                 # two windows past the warm-up
    found = _run(monitor, clock, [(0.3, 0.01)] * 100, first=26)
    assert [a.step for a in found] == [30]
    # still slow 100 steps later: the same episode, the baseline still the healthy 0.1 s
    assert _run(monitor, clock, [(0.12, 0.01)] * 10, first=126) == []
    [drop] = [d for d in monitor.detectors if isinstance(d, ThroughputDropDetector)]
    assert drop._best.step_s == pytest.approx(0.1)


def test_a_data_time_given_in_extra_counts_as_the_argument(tmp_path, clock):
    """Before data_time_s was an argument, custom loops logged it through extra."""
    monitor = _monitor(tmp_path, clock, throughput_drop_factor=10.0)
    found = []
    for step in range(1, 31):
        clock.advance(0.1)
        found += monitor.observe(step=step, loss=1.0, extra={"data_time_s": 0.08})
    assert [a.kind for a in found] == ["data_bound"]
    monitor.close()
    assert read_rank_log(monitor.log_path).steps[-1]["data_time_s"] == 0.08


def test_a_segment_that_starts_during_a_drop_learns_its_own_baseline(tmp_path, clock):
    """The first segment ends slow (its drop still open); the next one learns its own pace
    (3x the step: its steady pace, no alarm) and a drop against that pace is found. An
    episode left open used to keep the new baseline from being learned: an AssertionError
    at the new segment's first full window."""
    monitor = _monitor(tmp_path, clock)
    _run(monitor, clock, [None] * 40)
    assert [a.step for a in _run(monitor, clock, [(0.3, 0.01)] * 20, first=41)] == [45]
    monitor.close()
    monitor.start()
    assert _run(monitor, clock, [(0.3, 0.01)] * 60, first=61) == []
    [drop] = _run(monitor, clock, [(0.9, 0.01)] * 10, first=121)
    assert drop.step == 125 and drop.threshold == pytest.approx(0.45)
    monitor.close()
