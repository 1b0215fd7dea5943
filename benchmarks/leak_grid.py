"""memory_growth with default settings: how soon a leak of each rate is found, against the time
it leaves, and how many alarms healthy runs raise. faults.py's ``memory_growth`` scenario.

1. Real training (the demo's language model, GRAPH_MODE on the CPU, TrainMonitor + wrap,
   every default): a healthy run of HEALTHY_S seconds (its memory_growth alarms are false
   alarms), then the same run leaking REAL_LEAK bytes/s of touched host memory from its first
   step until the rule stops it (at most half the host's memory, a failure by then).
2. The grid: leaks from 10 GB/min to 1 GB/day, on the host and on an NPU, through the
   detector the monitor builds (``build_detectors`` with the default settings). Days of
   samples cannot be waited for, so they are made: one every ``hardware_interval_s`` (2 s),
   the healthy run's own RSS wander (its samples after the warm-up, around their median,
   repeated) under a linear leak from LEAK_AT on; the host's headroom is what this host had
   available, the NPU's a 64 GB card with 30 GB in use (npu-smi's HBM, in MB). Latency is from
   the leak's start to the alarm; "left" is the share of the time to exhaustion that remained.
3. What must raise nothing, a day of samples each at the defaults: one jump then a plateau, a
   sawtooth (a 0.3 GB pool freed every 10 min), another process eating the host, the healthy
   run's wander alone.

    python benchmarks/faults.py --only memory_growth      (or python benchmarks/leak_grid.py)
"""
from __future__ import annotations

import io
import mmap
import statistics
import sys
import tempfile
import time

import mindspore as ms
import psutil
from mindspore.train import Callback

from mindwatch.detectors import MemoryGrowthDetector, build_detectors
from mindwatch.detectors.memory_trend import LEAD
from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.demo.model import build_demo
from mindwatch.observation import DeviceSample, HardwareSample
from mindwatch.runlog import read_rank_log
from mindwatch.settings import MonitorSettings

HEALTHY_S = 180.0
REAL_LEAK = 180e6                   # bytes/s: about 10 GB/min
LEAK_AT = 600.0                     # s of simulated samples before a leak starts
GB = 1e9
RATES = (("10 GB/min", 10 / 60), ("1 GB/min", 1 / 60), ("10 GB/h", 10 / 3600),
         ("1 GB/h", 1 / 3600), ("100 MB/h", 0.1 / 3600), ("1 GB/day", 1 / 86400))
NPU_TOTAL_MB, NPU_USED_MB = 65536.0, 30000.0
DEFAULTS = MonitorSettings()


class Leak(Callback):
    """``rate`` bytes/s of touched host memory from the first step's end on, at most half of
    what the host had available; every step lasts at least ``min_step_s`` (so that the run
    lasts ``seconds`` of wall time for the healthy one)."""

    def __init__(self, rate: float, seconds: float, min_step_s: float = 0.02):
        self.rate, self.seconds, self.min_step_s = rate, seconds, min_step_s
        self.kept: list[mmap.mmap] = []
        self.leaked, self.budget = 0, psutil.virtual_memory().available // 2
        self.began = self.last = self.start = None

    def on_train_step_begin(self, run_context):
        self.began = time.perf_counter()

    def on_train_step_end(self, run_context):
        now = time.perf_counter()
        self.start = self.start or now
        size = int(self.rate * (now - self.last)) if self.last is not None else 0
        self.last = now
        if self.leaked + size > self.budget or now - self.start > self.seconds:
            run_context.request_stop()
        elif size:
            block = mmap.mmap(-1, size)         # its own mapping: no reused resident pages
            block.write(b"\1" * size)
            self.kept.append(block)
            self.leaked += size
        time.sleep(max(self.min_step_s - (time.perf_counter() - self.began), 0.0))

    def free(self) -> None:
        for block in self.kept:
            block.close()
        self.kept = []


def real_run(rate: float, seconds: float, workdir: str):
    """One real run with every default but on_anomaly memory_growth "stop"; its run log."""
    loss, optimizer, data = build_demo(seed=0, steps=int(seconds / 0.02) + 100)
    run_dir = tempfile.mkdtemp(dir=workdir)
    monitor = TrainMonitor(run_dir, stream=io.StringIO(), on_anomaly={"memory_growth": "stop"})
    leak = Leak(rate, seconds)
    try:
        ms.train.Model(monitor.wrap(loss, optimizer)).train(
            1, data, callbacks=[leak, monitor], dataset_sink_mode=False)
    finally:
        leak.free()
    return read_rank_log(f"{run_dir}/rank_0.jsonl")


def wander(log) -> list[float]:
    """The healthy run's RSS after its warm-up, less its median (GB)."""
    warmed = log.steps[DEFAULTS.trend_warmup - 1]["time"] if len(log.steps) >= \
        DEFAULTS.trend_warmup else log.steps[-1]["time"]
    rss = [h["rss_gb"] for h in log.of_kind("hardware") if h["time"] > warmed
           and h["rss_gb"] is not None]
    middle = statistics.median(rss)
    return [value - middle for value in rss] or [0.0]


def _host(t: float, rss: float, available: float) -> HardwareSample:
    return HardwareSample(time=t, rss_gb=rss, mem_available_gb=available, mem_used_gb=8.0,
                          segment_steps=10**6)


def _npu(t: float, used_mb: float) -> HardwareSample:
    return HardwareSample(time=t, segment_steps=10**6, devices=[DeviceSample(
        type="npu", index=0, mem_used_mb=round(used_mb), mem_total_mb=NPU_TOTAL_MB)])


def _detector() -> MemoryGrowthDetector:
    [detector] = [d for d in build_detectors(DEFAULTS) if isinstance(d, MemoryGrowthDetector)]
    return detector


def simulate(rate_gb_s: float, *, npu: bool, available_gb: float, noise: list[float]):
    """Seconds from the leak's start to the alarm, and the alarm (None, None: exhausted first)."""
    detector, interval = _detector(), DEFAULTS.hardware_interval_s
    headroom = (NPU_TOTAL_MB - NPU_USED_MB) / 1000 if npu else available_gb
    end, i = LEAK_AT + headroom / rate_gb_s, 0
    while (t := i * interval) < end:
        leaked = max(t - LEAK_AT, 0.0) * rate_gb_s
        wobble = noise[i % len(noise)]
        sample = (_npu(t, NPU_USED_MB + 1000 * leaked) if npu
                  else _host(t, 4.0 + wobble + leaked, available_gb - wobble - leaked))
        found = detector.update_hardware(sample)
        if found:
            return t - LEAK_AT, found[0]
        i += 1
    return None, None


def healthy_shapes(available_gb: float, noise: list[float]) -> dict[str, int]:
    """A day of samples of each shape that must raise nothing: its alarm count."""
    day, interval = 86400.0, DEFAULTS.hardware_interval_s
    shapes = {
        "jump then plateau": lambda i, t: (4.0 + (2.0 if t > 3600 else 0.0), None),
        "sawtooth 0.3 GB / 10 min": lambda i, t: (4.0 + 0.3 * ((t % 600) / 600), None),
        "another process eats the host": lambda i, t: (4.0, available_gb * (1 - t / day / 2)),
        "healthy wander": lambda i, t: (4.0 + noise[i % len(noise)], None),
    }
    counts = {}
    for name, shape in shapes.items():
        detector, alarms = _detector(), 0
        for i in range(int(day / interval)):
            t = i * interval
            rss, available = shape(i, t)
            available = available if available is not None else available_gb - (rss - 4.0)
            alarms += len(detector.update_hardware(_host(t, rss, available)))
        counts[name] = alarms
    return counts


def main(argv: list[str] | None = None) -> int:
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    workdir = tempfile.mkdtemp(prefix="mindwatch-leaks-")
    available = psutil.virtual_memory().available / GB
    print(f"memory_growth at the default settings (windows from "
          f"{DEFAULTS.memory_growth_window_s:g} s, a sample every "
          f"{DEFAULTS.hardware_interval_s:g} s); this host: {available:.1f} GB available")
    healthy = real_run(0.0, HEALTHY_S, workdir)
    false = [a for a in healthy.anomalies if a["anomaly"] == "memory_growth"]
    samples = healthy.of_kind("hardware")
    print(f"real healthy run: {len(healthy.steps)} steps, {len(samples)} samples over "
          f"{HEALTHY_S:.0f} s, RSS {samples[0]['rss_gb']:.2f} -> {samples[-1]['rss_gb']:.2f} "
          f"GB: false alarms {len(false)}")
    leaky = real_run(REAL_LEAK, 600.0, workdir)
    found = [a for a in leaky.anomalies if a["anomaly"] == "memory_growth"]
    first = leaky.of_kind("hardware")[0]
    exhaustion = first["mem_available_gb"] * GB / REAL_LEAK
    if found:
        latency = found[0]["time"] - leaky.steps[0]["time"]
        print(f"real leak of {REAL_LEAK / 1e6:.0f} MB/s from step 1: found after "
              f"{latency:.1f} s of {exhaustion:.0f} s to exhaustion ({1 - latency / exhaustion:.0%}"
              f" left); projected {found[0]['projected_exhaustion_s']:.0f} s")
    else:
        print(f"real leak of {REAL_LEAK / 1e6:.0f} MB/s: NOT found before half the memory")
    noise = wander(healthy)
    print(f"\nthe grid (the healthy run's RSS wander, {statistics.pstdev(noise) * 1000:.1f} MB "
          f"sd, under each leak; the leak starts at {LEAK_AT:.0f} s)")
    print(f"{'leak':10s} {'memory':6s} {'to exhaustion':>14s} {'found after':>12s} "
          f"{'left':>6s} {'window':>9s} {'projected':>10s}")
    worst = 1.0
    for name, rate in RATES:
        for npu in (False, True):
            started = time.perf_counter()
            latency, alarm = simulate(rate, npu=npu, available_gb=available, noise=noise)
            headroom = (NPU_TOTAL_MB - NPU_USED_MB) / 1000 if npu else available
            exhaustion = headroom / rate
            cost = time.perf_counter() - started
            if latency is None:
                print(f"{name:10s} {'npu' if npu else 'host':6s} {_d(exhaustion):>14s} "
                      f"{'MISSED':>12s}")
                worst = 0.0
                continue
            left = 1 - latency / exhaustion
            worst = min(worst, left)
            window = alarm.threshold / LEAD
            print(f"{name:10s} {'npu' if npu else 'host':6s} {_d(exhaustion):>14s} "
                  f"{_d(latency):>12s} {left:6.0%} {_d(window):>9s} {_d(alarm.value):>10s}"
                  f"   ({cost:.1f} s to simulate)")
    print(f"least share of the time to exhaustion left when found: {worst:.0%} (goal >= 50%)")
    print("\na simulated day of each shape that must raise nothing: alarms")
    for name, count in healthy_shapes(available, noise).items():
        print(f"  {name:32s} {count}")
    return 0


def _d(seconds: float) -> str:
    from mindwatch.basics.format import duration
    return duration(seconds)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
