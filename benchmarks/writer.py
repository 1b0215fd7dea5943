"""Run-log writer throughput: records per second through ``JsonlSink`` on one core.

Step records as the monitor writes them (every field, finite values), once through the
fast encoder (msgspec, when installed) and once through the standard ``json`` encoder,
side by side; then hardware records (nested: 8 devices), which always take the standard
path. The goal: at least 200,000 step records/s.

    python benchmarks/writer.py [--records 200000]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
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
