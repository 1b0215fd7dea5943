"""memory_growth on hardware samples, with default settings: a steady leak of any rate from
10 GB/min to 1 GB/day, on the host or a device, is found while at least half of the time it
leaves remains, with that time; one jump, a sawtooth, another process, a segment's start and
a noisy healthy series are not."""
import io
import random

import pytest

from mindwatch import Monitor
from mindwatch.basics import format as fmt
from mindwatch.detectors import MemoryGrowthDetector
from mindwatch.detectors.memory_trend import BUCKETS, LEAD, MemoryTrend, theil_sen
from mindwatch.observation import DeviceSample, HardwareSample
from mindwatch.runlog import read_rank_log
from mindwatch.settings import MonitorSettings

DEFAULTS = MonitorSettings()
INTERVAL_S = DEFAULTS.hardware_interval_s          # 2 s
WARMED = 100                                       # segment steps past trend_warmup
GB_PER_MIN, GB_PER_HOUR, GB_PER_DAY = 1 / 60, 1 / 3600, 1 / 86400


def _detector(**kwargs):
    return MemoryGrowthDetector(**{"window_s": DEFAULTS.memory_growth_window_s,
                                   "horizon_s": DEFAULTS.memory_growth_horizon_s,
                                   "warmup": DEFAULTS.trend_warmup, **kwargs})


def _host(t, rss, available, steps=WARMED):
    return HardwareSample(time=t, rss_gb=rss, mem_available_gb=available, mem_used_gb=4.0,
                          segment_steps=steps)


def _npu(t, used_mb, total_mb=65536.0, steps=WARMED):
    return HardwareSample(time=t, segment_steps=steps, devices=[
        DeviceSample(type="npu", index=3, mem_used_mb=used_mb, mem_total_mb=total_mb)])


def _feed(detector, samples):
    return [a for s in samples for a in detector.update_hardware(s)]


def _leak_until_found(rate_gb_s, *, device, headroom_gb, interval_s=INTERVAL_S, seed=0):
    """Samples every ``interval_s`` of a series that is flat (with 20 MB of noise) for 10
    minutes, then leaks ``rate_gb_s``; returns (seconds from the leak's start to the anomaly,
    the anomaly), or (None, None) when the memory ran out first."""
    detector, rng = _detector(), random.Random(seed)
    start, exhausted = 600.0, 600.0 + headroom_gb / rate_gb_s
    t = 0.0
    while t < exhausted:
        leaked = max(t - start, 0.0) * rate_gb_s + rng.gauss(0.0, 0.02)
        sample = (_npu(t, 20000.0 + 1000 * leaked, 20000.0 + 1000 * headroom_gb) if device
                  else _host(t, 2.0 + leaked, headroom_gb - leaked))
        found = detector.update_hardware(sample)
        if found:
            return t - start, found[0]
        t += interval_s
    return None, None


# 1 GB/day at one sample every 2 minutes: the windows that find it are days long, with thousands of
# samples in each bucket either way (benchmarks/faults.py runs it at 2 s).
@pytest.mark.parametrize("rate, interval_s", [
    (10 * GB_PER_MIN, INTERVAL_S), (GB_PER_MIN, INTERVAL_S), (10 * GB_PER_HOUR, INTERVAL_S),
    (GB_PER_HOUR, INTERVAL_S), (GB_PER_DAY, 120.0)],
    ids=["10GB/min", "1GB/min", "10GB/h", "1GB/h", "1GB/day"])
@pytest.mark.parametrize("device", [False, True], ids=["host", "npu"])
def test_a_leak_of_any_rate_is_found_while_half_its_time_remains(rate, interval_s, device):
    headroom = 40.0 if device else 20.0        # GB: an NPU's free HBM, a host's available
    latency, growth = _leak_until_found(rate, device=device, headroom_gb=headroom,
                                        interval_s=interval_s)
    time_to_exhaustion = headroom / rate
    assert latency is not None and latency <= time_to_exhaustion / 2
    assert growth.kind == "memory_growth" and growth.step is None     # the monitor fills it
    assert growth.fields["memory"] == ("npu:3" if device else "host")
    # the projection from where it was found: what is left at the leak's rate (longer when
    # the window that found it still held a little of the time before the leak)
    left = time_to_exhaustion - latency
    assert left * 0.9 <= growth.value <= left * 1.25
    assert growth.fields["projected_exhaustion_s"] == growth.value
    assert growth.value < growth.threshold


def test_the_message_says_the_rate_the_window_and_the_time_left():
    rate = 1.0 / 3600                                   # 1 GB/h, 0.5 GB available
    detector, found = _detector(), []
    for i in range(400):
        found += detector.update_hardware(_host(2.0 * i, 1.0 + rate * 2 * i, 0.5 - rate * 2 * i))
        if found and len(found) == 1 and not hasattr(detector, "found_at"):
            detector.found_at = 2.0 * i
    [growth] = found                                   # once per episode
    # the 8-minute window is the shortest that has seen a quarter of the time left
    t = detector.found_at
    assert t == 510.0             # once its buckets span it (a bucket is 20 s)
    assert growth.value == pytest.approx((0.5 - rate * t) / rate)
    assert growth.threshold == LEAD * 480.0
    rss, available = 1.0 + rate * t, 0.5 - rate * t
    assert (f"this process's host memory (RSS {rss:.3g} GB, {available:.3g} GB of the host "
            f"available) rose steadily by 1 GB/h over the last 8m00s; at this rate it runs out "
            f"in {fmt.duration((0.5 - rate * t) / rate)}") in growth.message


def test_one_jump_then_a_plateau_is_no_trend():
    samples = [_host(2.0 * i, 1.0 if i < 600 else 3.0, 5.0 if i < 600 else 3.0)
               for i in range(4000)]
    assert _feed(_detector(), samples) == []


def test_a_ramp_that_stops_far_from_the_limit_is_no_trend():
    """A cache filled over a minute (2 GB of 20): fast, but it would take minutes more at its
    rate, and a minute of rise is no evidence for that long."""
    samples = [_host(2.0 * i, 1.0 + min(max(i - 300, 0), 30) * 2 / 30,
                     20.0 - min(max(i - 300, 0), 30) * 2 / 30) for i in range(3000)]
    assert _feed(_detector(), samples) == []


def _sawtooth(pool, period):
    """A pool that grows by ``pool`` GB over ``period`` samples and is freed, with 2 GB of the
    host available at its low point."""
    return [_host(2.0 * i, 1.0 + pool * ((i % period) / period),
                  2.0 - pool * ((i % period) / period)) for i in range(20 * period + 600)]


@pytest.mark.parametrize("period", [20, 80, 300])
def test_a_sawtooth_is_no_trend(period):
    """0.3 GB, every 40 s to 10 min: a ramp of less than a quarter of the headroom is never
    steep enough to run out within four windows of its length."""
    assert _feed(_detector(), _sawtooth(0.3, period)) == []


@pytest.mark.parametrize("pool", [0.5, 1.0])
@pytest.mark.parametrize("period", [20, 80, 300])
def test_a_steep_sawtooths_first_ramp_is_a_leak_until_it_falls_back(period, pool):
    """A pool of a third or half of the host's 2 GB: its first ramp may be as steep as a leak
    that would take the rest within four windows, and nothing tells them apart until the pool
    is freed; from then on no window finds an urgent rise (asked of the trend: the detector's
    episode would hide them)."""
    trend = MemoryTrend(DEFAULTS.memory_growth_window_s)
    urgent = []
    for sample in _sawtooth(pool, period):
        for judged in trend.add(sample.time, sample.rss_gb, sample.mem_available_gb):
            if judged.rate > 0 and sample.mem_available_gb / judged.rate < LEAD * judged.window_s:
                urgent.append(sample.time)
    assert not urgent or max(urgent) < 2.0 * period + 4.0
    if pool == 1.0:
        assert urgent


def test_a_noisy_healthy_series_is_no_trend():
    """A day of a healthy process: RSS wanders by 100 MB around its level, with GC drops."""
    rng = random.Random(3)
    samples = [_host(60.0 * i, 4.0 + rng.gauss(0, 0.05) - (0.3 if i % 97 == 0 else 0.0), 8.0)
               for i in range(1440)]
    assert _feed(_detector(), samples) == []


def test_another_process_eating_the_host_does_not_make_a_tiny_trend_urgent():
    """This process's RSS creeps up by 0.1 MB/s while another process takes 10 MB/s of the
    host: the projection is this process's own, and far off."""
    samples = [_host(2.0 * i, 1.0 + 1e-4 * 2 * i, 100.0 - 0.01 * 2 * i) for i in range(900)]
    assert _feed(_detector(), samples) == []


def test_the_start_of_a_segment_is_left_out():
    """Compilation and memory pools grow in the first steps; a second model.train's start
    grows again, and the trend is learned anew."""
    detector = _detector()
    steep = 300.0 / 3600                                  # 300 GB/h while warming up
    start = [_host(2.0 * i, 1.0 + steep * 2 * i, 12.0 - steep * 2 * i, steps=i // 4)
             for i in range(200)]                          # steps 0..49: never judged
    assert _feed(detector, start) == []
    flat = [_host(400.0 + 2 * i, 1.3, 11.7, steps=60 + i) for i in range(600)]
    assert _feed(detector, flat) == []
    again = [_host(1600.0 + 2 * i, 1.3 + steep * 2 * i, 11.7 - steep * 2 * i, steps=i // 4)
             for i in range(200)]
    assert _feed(detector, again) == []


def test_a_device_filling_toward_its_total():
    detector = _detector()
    samples = [_npu(2.0 * i, 20000.0 + 200.0 * i) for i in range(200)]   # 6 GB/min
    [growth] = _feed(detector, samples)
    assert growth.fields["memory"] == "npu:3"
    assert growth.message.startswith("memory growing: NPU 3 memory (")
    assert "rose steadily by 5.86 GB/min over the last 2m00s" in growth.message
    # 45 GB free at 100 MB/s: the 2-minute window is the first to see a quarter of that
    assert growth.threshold == LEAD * 120.0
    used = 20000.0 + 200.0 * 63                  # its buckets span it: the 64th sample
    assert growth.value == pytest.approx((65536.0 - used) / 100.0)


def test_theil_sen_ignores_an_outlier():
    times = [float(t) for t in range(BUCKETS)]
    values = [2.0 * t for t in times]
    values[5] = 1000.0
    assert theil_sen(times, values) == pytest.approx(2.0)


def test_off_without_a_window_and_capped_by_the_horizon():
    rate = 100.0 / 3600                              # 100 GB/h with 2 GB left: 72 s
    leak = [_host(2.0 * i, 1.0 + rate * 2 * i, 2.0 - rate * 2 * i) for i in range(40)]
    assert _feed(_detector(window_s=None), leak) == []
    slow = 1.0 / 3600                                # 1 GB/h with 20 GB left: 20 h
    slow_leak = [_host(60.0 * i, 1.0 + slow * 60 * i, 20.0 - slow * 60 * i)
                 for i in range(600)]
    assert _feed(_detector(horizon_s=3600.0), slow_leak) == []
    [fast] = _feed(_detector(horizon_s=3600.0), leak)
    assert fast.threshold == LEAD * 30.0


def test_through_the_monitor_the_anomaly_gets_its_step_and_record(tmp_path, clock):
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                      trend_warmup=3)
    found = []
    rate = 0.1                                       # 6 GB/min with 20 GB available
    for step in range(1, 61):
        clock.advance(2.0)
        found += monitor.observe(step=step, loss=1.0)
        found += monitor.observe_hardware(HardwareSample(
            time=clock.time(), rss_gb=1.0 + rate * 2 * step,
            mem_available_gb=20.0 - rate * 2 * step, mem_used_gb=4.0))
    monitor.close()
    [growth] = found
    # the 30 s window sees 3 of the 16 minutes left, the 60 s one (from step 3's sample on,
    # spanned at step 34) 4 of 2m12s: 4 windows
    assert growth.step == 34
    [record] = read_rank_log(monitor.log_path).anomalies
    assert record["anomaly"] == "memory_growth" and record["memory"] == "host"
    assert record["projected_exhaustion_s"] == pytest.approx(record["value"])
    assert record["value"] == pytest.approx((20.0 - rate * 2 * 34) / rate)
    assert record["threshold"] == LEAD * 60.0 and record["step"] == growth.step


def test_the_other_ranks_leaking_alike_shorten_the_projection():
    """Four ranks of the host leak 10 GB/h each: the available memory falls 40 GB/h."""
    rate = 10.0 / 3600
    [growth] = _feed(_detector(), [_host(2.0 * i, 1.0 + rate * 2 * i, 4.0 - 4 * rate * 2 * i)
                                   for i in range(200)])
    t = 2.0 * 61                              # found by the 2-minute window, once spanned
    assert growth.value == pytest.approx((4.0 - 4 * rate * t) / (4 * rate))


def test_a_flat_stretch_within_a_leak_does_not_end_its_episode():
    """A garbage collection flattens a stretch of the rise: still one episode."""
    rate = 10.0 / 3600
    rss = [1.0 + rate * 2 * i for i in range(1000)]
    for i in range(300, 330):                     # 60 s flat, then the leak goes on
        rss[i] = rss[300]
    for i in range(330, 1000):
        rss[i] -= rate * 60
    found = _feed(_detector(), [_host(2.0 * i, rss[i], 4.0 - (rss[i] - 1.0))
                                for i in range(1000)])
    assert len(found) == 1


def test_sparse_samples_are_judged_over_the_windows_in_time():
    """A busy host's sampler delivers one sample every 25 s: the windows of 30 s to 2 min
    hold too few to judge, the 4-minute one finds the leak."""
    rate = 10.0 / 3600
    [growth] = _feed(_detector(), [_host(25.0 * i, 1.0 + rate * 25 * i, 3.0 - rate * 25 * i)
                                   for i in range(60)])
    assert growth.threshold == LEAD * 240.0
    assert "over the last 4m00s" in growth.message


def test_an_episode_survives_a_resumed_monitor():
    rate = 10.0 / 3600
    leak = [_host(2.0 * i, 1.0 + rate * 2 * i, 4.0 - rate * 2 * i) for i in range(700)]
    first = _detector()
    assert len(_feed(first, leak[:300])) == 1                 # found at 510 s
    resumed = _detector()
    resumed.load_state_dict(first.state_dict())
    assert _feed(resumed, leak[300:]) == []
    old = _detector()
    old.load_state_dict({"episodes": {"host": True}})     # a log from before the ladder
    assert len(_feed(old, leak[:300])) == 1
