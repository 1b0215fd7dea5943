"""Run-log writer throughput: records per second through ``JsonlSink`` on one core.

Step records as the monitor writes them (every field, finite values), once through the
fast encoder (msgspec, when installed) and once through the standard ``json`` encoder,
side by side; then hardware records (nested: 8 devices), which always take the standard
path. The goal: at least 200,000 step records/s.

``--dir PATH --writers N`` measures a file system instead (a cluster's shared one, where
every rank appends to its own run log): N processes each append step records to their own
file in PATH at ``--per-second`` records a second, and the slowest writes are printed (the
99th, 99.9th percentile and the worst, ms): a stalled write stalls the step that makes it
(docs/scale.md).

    python benchmarks/writer.py [--records 200000]
    python benchmarks/writer.py --dir /shared/scratch --writers 64 --per-second 10
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from mindwatch.sinks import line
from mindwatch.sinks.jsonl import JsonlSink

STEP = {"kind": "step", "rank": 0, "time": 1796087816.4519076, "step": 1, "epoch": 1,
        "loss": 2.3456789, "loss_smooth": 2.4567, "lr": 0.0003, "grad_norm": 1.2345,
        "step_time_s": 0.0123, "skipped": False, "steps_covered": 1, "samples_per_s": 1234.5,
        "data_time_s": 0.001, "loss_scale": None}
HARDWARE = {"kind": "hardware", "rank": 0, "time": 1796087816.4, "cpu_percent": 12.5,
            "mem_used_gb": 100.1, "mem_available_gb": 900.2, "rss_gb": 12.3,
            "devices": [{"type": "npu", "index": i, "util_percent": 95.0, "mem_used_mb": 6e4,
                         "mem_total_mb": 65536.0, "temp_c": 61.0, "power_w": 310.5}
                        for i in range(8)], "framework_memory": None}


def rate(record: dict, count: int, directory: str) -> float:
    sink = JsonlSink(os.path.join(directory, f"{record['kind']}-{time.monotonic_ns()}.jsonl"))
    started = time.perf_counter()
    for step in range(count):
        record["step"] = step
        sink.write(record)
    elapsed = time.perf_counter() - started
    sink.close()
    return count / elapsed


def latencies(path: str, count: int, per_second: float) -> list[float]:
    """One writer's write times (s) of ``count`` step records to ``path``, paced."""
    sink, found = JsonlSink(path), []
    record = dict(STEP)
    for step in range(count):
        record["step"] = step
        started = time.perf_counter()
        sink.write(record)
        found.append(time.perf_counter() - started)
        time.sleep(max(0.0, 1.0 / per_second - found[-1]))
    sink.close()
    return found


def file_system(directory: str, writers: int, count: int, per_second: float) -> int:
    from concurrent.futures import ProcessPoolExecutor

    paths = [os.path.join(directory, f"mindwatch-bench-rank_{r}-{os.getpid()}.jsonl")
             for r in range(writers)]
    try:
        with ProcessPoolExecutor(writers) as pool:
            found = sorted(t for times in pool.map(latencies, paths, [count] * writers,
                                                   [per_second] * writers) for t in times)
    finally:
        for path in paths:
            if os.path.exists(path):
                os.remove(path)
    at = lambda share: found[min(len(found) - 1, int(share * len(found)))] * 1e3  # noqa: E731
    print(f"{writers} writers x {count} step records at {per_second:g}/s in {directory}: "
          f"median {at(0.5):.3f} ms, p99 {at(0.99):.3f} ms, p99.9 {at(0.999):.3f} ms, "
          f"worst {found[-1] * 1e3:.3f} ms per write")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--dir", help="measure this file system's write latency instead")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--per-second", type=float, default=10.0)
    args = parser.parse_args()
    if args.dir is not None:
        return file_system(args.dir, args.writers, min(args.records, 2000), args.per_second)
    fast = line._FAST
    with tempfile.TemporaryDirectory() as directory:
        rows = []
        for _ in range(3):                   # alternate the paths; keep each one's best
            rows.append(("step records, fast encoder", rate(dict(STEP), args.records,
                                                            directory) if fast else None))
            line._FAST = None
            rows.append(("step records, standard json", rate(dict(STEP), args.records,
                                                             directory)))
            line._FAST = fast
            rows.append(("hardware records (8 devices)", rate(dict(HARDWARE),
                                                              args.records // 4, directory)))
    best: dict[str, float] = {}
    for name, value in rows:
        if value is not None:
            best[name] = max(best.get(name, 0.0), value)
    print(f"JsonlSink.write on one core, best of 3 rounds ({args.records:,} step records each)")
    for name, value in best.items():
        print(f"  {name:<32}{value:>12,.0f} records/s")
    step_rate = best.get("step records, fast encoder", best["step records, standard json"])
    print(f"goal: at least 200,000 step records/s -> "
          f"{'OK' if step_rate >= 200_000 else 'OVER'} ({step_rate:,.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
