"""memory_growth on hardware samples: a steady leak is found with the time it leaves, one jump,
a sawtooth, a segment's start and memory far from its limit are not."""
import io

import pytest

from mindwatch import Monitor
from mindwatch.detectors import MemoryGrowthDetector
from mindwatch.detectors.memory_trend import BUCKETS, theil_sen
from mindwatch.observation import DeviceSample, HardwareSample
from mindwatch.runlog import read_rank_log

WINDOW_S = 240.0          # 24 buckets of 10 s; samples every 2 s


def _host(t, rss, available, steps=100):
    return HardwareSample(time=t, rss_gb=rss, mem_available_gb=available, mem_used_gb=4.0,
                          segment_steps=steps)


def _feed(detector, samples):
    return [a for s in samples for a in detector.update_hardware(s)]


def _detector(**kwargs):
    return MemoryGrowthDetector(**{"window_s": WINDOW_S, "horizon_s": 3600.0, "warmup": 50,
                                   **kwargs})


def test_a_steady_host_leak_is_found_with_its_projected_exhaustion():
    detector = _detector()
    # 1 GB/h leak: RSS +2/3600 GB per 2 s, 0.5 GB available falling alike
    rate = 1.0 / 3600
    samples = [_host(2.0 * i, 1.0 + rate * 2 * i, 0.5 - rate * 2 * i) for i in range(200)]
    found = _feed(detector, samples)
    [growth] = found                                   # once per episode
    assert growth.kind == "memory_growth" and growth.step is None      # the monitor fills it
    assert growth.fields["memory"] == "host"
    # judged once the bucket medians span 22 of the window's 24 buckets: the bucket closed by
    # the sample at t = 230 s (its median at 224 s, the first one's at 4 s): 0.5 - 230/3600
    # GB left at 1 GB/h
    projected = growth.fields["projected_exhaustion_s"]
    assert projected == pytest.approx((0.5 - rate * 230) / rate)
    assert growth.value == projected and growth.threshold == 3600.0
    assert "rose steadily by 1 GB/h over the last 4m00s; at this rate it runs out in 26m10s" \
        in growth.message


def test_a_leak_far_from_the_limit_waits_until_it_is_within_the_horizon():
    detector = _detector()
    rate = 10.0 / 3600                                   # 10 GB/h with 20 GB left: 2 h
    found = _feed(detector, [_host(2.0 * i, 1.0 + rate * 2 * i, 20.0 - rate * 2 * i)
                             for i in range(3000)])
    [growth] = found
    # fires when fewer than 3600 s are left: 10 GB left, at t = 3600 s, on a bucket's close
    assert growth.value < 3600.0 and growth.value > 3600.0 - 60
    assert growth.fields["projected_exhaustion_s"] == growth.value


def test_one_jump_then_a_plateau_is_no_trend():
    detector = _detector()
    samples = [_host(2.0 * i, 1.0 if i < 60 else 3.0, 5.0 if i < 60 else 3.0)
               for i in range(400)]
    assert _feed(detector, samples) == []


def test_a_sawtooth_is_no_trend():
    detector = _detector()
    samples = [_host(2.0 * i, 1.0 + 0.5 * ((i % 40) / 40), 2.0) for i in range(600)]
    assert _feed(detector, samples) == []


def test_the_start_of_a_segment_is_left_out():
    """Compilation and memory pools grow in the first steps; a second model.train's start
    grows again, and the trend is learned anew."""
    detector = _detector()
    rate = 5.0 / 3600
    # steps 0..49 (warm-up): a steep rise that stops; then flat
    start = [_host(2.0 * i, 1.0 + rate * 2 * i, 2.0 - rate * 2 * i, steps=i // 4)
             for i in range(200)]
    flat = [_host(400.0 + 2 * i, 1.3, 1.7, steps=60 + i) for i in range(200)]
    assert _feed(detector, start[:200]) == []     # steps 0..49 only: never judged
    assert _feed(detector, flat) == []
    again = [_host(1000.0 + 2 * i, 1.3 + rate * 2 * i, 1.7 - rate * 2 * i, steps=i // 4)
             for i in range(200)]
    assert _feed(detector, again) == []


def test_device_memory_rising_toward_its_total():
    detector = _detector()
    samples = []
    for i in range(200):
        used = 20000.0 + 200.0 * i                           # 200 MB per 2 s: 360 GB/h
        samples.append(HardwareSample(time=2.0 * i, segment_steps=100, devices=[
            DeviceSample(type="npu", index=3, mem_used_mb=used, mem_total_mb=65536.0)]))
    [growth] = _feed(detector, samples)
    assert growth.fields["memory"] == "npu:3"
    assert growth.message.startswith("memory growing: NPU 3 memory (")
    assert growth.value == pytest.approx((65536.0 - (20000.0 + 200.0 * 115)) / 100.0)


def test_theil_sen_ignores_an_outlier():
    times = [float(t) for t in range(BUCKETS)]
    values = [2.0 * t for t in times]
    values[5] = 1000.0
    assert theil_sen(times, values) == pytest.approx(2.0)


def test_off_without_a_horizon():
    detector = _detector(horizon_s=None)
    rate = 100.0 / 3600
    assert _feed(detector, [_host(2.0 * i, 1.0 + rate * 2 * i, 2.0 - rate * 2 * i)
                            for i in range(200)]) == []


def test_through_the_monitor_the_anomaly_gets_its_step_and_record(tmp_path, clock):
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                      memory_growth_window_s=WINDOW_S, trend_warmup=3)
    found = []
    rate = 2.0 / 3600
    for step in range(1, 151):
        clock.advance(2.0)
        found += monitor.observe(step=step, loss=1.0)
        found += monitor.observe_hardware(HardwareSample(
            time=clock.time(), rss_gb=1.0 + rate * 2 * step, mem_available_gb=1.0 - rate * 2 * step,
            mem_used_gb=4.0))
    monitor.close()
    [growth] = found
    assert growth.step == 118        # 230 s of samples from step 3 on, on a bucket's close
    [record] = read_rank_log(monitor.log_path).anomalies
    assert record["anomaly"] == "memory_growth" and record["memory"] == "host"
    assert record["projected_exhaustion_s"] == pytest.approx(record["value"])
    assert record["threshold"] == 3600.0 and record["step"] == growth.step


def test_another_process_eating_the_host_does_not_make_a_tiny_trend_urgent():
    """This process's RSS creeps up by 0.1 MB/s while another process takes 100 MB/s of the
    host: the projection is this process's own, and far off."""
    detector = _detector()
    samples = [_host(2.0 * i, 1.0 + 1e-4 * 2 * i, 100.0 - 0.1 * 2 * i) for i in range(200)]
    assert _feed(detector, samples) == []


def test_the_other_ranks_leaking_alike_shorten_the_projection():
    """Four ranks of the host leak 1 GB/h each: the available memory falls 4 GB/h."""
    detector = _detector()
    rate = 1.0 / 3600
    [growth] = _feed(detector, [_host(2.0 * i, 1.0 + rate * 2 * i, 4.0 - 4 * rate * 2 * i)
                                for i in range(200)])
    assert growth.value == pytest.approx((4.0 - 4 * rate * 230) / (4 * rate))


def test_one_flat_bucket_within_a_leak_does_not_end_its_episode():
    """A garbage collection flattens a stretch of the rise: still one episode."""
    detector = _detector()
    rate = 1.0 / 3600
    rss = [1.0 + rate * 2 * i for i in range(400)]
    for i in range(150, 170):                     # 40 s flat, then the leak goes on
        rss[i] = rss[150]
    for i in range(170, 400):
        rss[i] -= rate * 40
    found = _feed(detector, [_host(2.0 * i, rss[i], 0.8 - (rss[i] - 1.0)) for i in range(400)])
    assert len(found) == 1


def test_sparse_samples_are_judged_over_the_window_in_time():
    """A busy host's sampler delivers one sample every 25 s (2.5 buckets): the rise is still
    judged over the last 240 s, not over 24 samples (600 s)."""
    detector = _detector()
    rate = 1.0 / 3600
    found = _feed(detector, [_host(25.0 * i, 1.0 + rate * 25 * i, 0.5 - rate * 25 * i)
                             for i in range(40)])
    [growth] = found
    assert growth.value == pytest.approx((0.5 - rate * 250) / rate)      # judged at t = 250 s
