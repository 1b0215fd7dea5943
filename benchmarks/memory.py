"""Memory of a long run: RSS growth of ``Monitor.observe`` from step 1,000 to step 200,000.

Every detector on, the JSONL run log and the console (to /dev/null) written, a hardware
sample every 1,000 steps through ``observe_hardware`` (no sampler thread: the figure is
then the monitor's own), one epoch for the whole run (an LLM epoch may be 10M steps: the
epoch mean must not hold every loss) and a few anomalies along the way,
so every structure that could grow with the run's length is fed. RSS is read from
/proc/self/statm after a full garbage collection at each checkpoint; the goal is at most
1 MB of growth from step 1,000 to the end (nothing grows with the run's length).

    python benchmarks/memory.py [--steps 200000]
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import random
import tempfile
import time

from mindwatch import Monitor
from mindwatch.observation import DeviceSample, HardwareSample

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    gc.collect()
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    args = parser.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as directory, open(os.devnull, "w") as null:
        monitor = Monitor(directory, stream=null, hardware_interval_s=None, batch_size=8,
                          on_anomaly="warn", print_interval=100)
        marks = {1_000, 10_000, 50_000, 100_000, args.steps}
        readings = []
        started = time.perf_counter()
        for step in range(1, args.steps + 1):
            loss = 3.0 * math.exp(-step / 50_000) + rng.gauss(0, 0.05)
            if step % 40_000 == 0:
                loss *= 10                           # a spike now and then: anomalies too
            monitor.observe(step=step, epoch=1, loss=loss, lr=3e-4,
                            grad_norm=1.0 + rng.random(), layer_grad_norms=None)
            if step % 1_000 == 0:
                monitor.observe_hardware(HardwareSample(
                    time=time.time(), cpu_percent=50.0, mem_used_gb=10.0,
                    mem_available_gb=100.0, rss_gb=1.0,
                    devices=[DeviceSample("npu", i, 90.0, 30_000.0, 65_536.0, 60.0, 300.0)
                             for i in range(8)]))
            if step in marks:
                readings.append((step, rss_mb()))
        elapsed = time.perf_counter() - started
        monitor.close()
        log_mb = os.path.getsize(os.path.join(directory, "rank_0.jsonl")) / 2**20
    print(f"{'step':>9}  {'RSS (MB)':>9}  {'growth since step 1,000 (MB)':>28}")
    base = readings[0][1]
    for step, rss in readings:
        print(f"{step:>9,}  {rss:>9.1f}  {rss - base:>28.2f}")
    growth = readings[-1][1] - base
    print(f"observe: {elapsed / args.steps * 1e6:.1f} us per step ({args.steps:,} steps, "
          f"run log {log_mb:.0f} MB); anomalies found: {len(monitor.anomalies)}")
    print(f"RSS growth from step 1,000 to {args.steps:,}: {growth:.2f} MB "
          f"(goal: at most 1 MB) -> {'OK' if growth <= 1.0 else 'OVER'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
