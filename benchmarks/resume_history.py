"""What ``resume=True`` costs on a long run: building a monitor that reads its rules' history
back from a 200,000-step log (pipeline/resumed_history.py, runlog/run_tail.py).

The log is views.py's (``write_rank``): every field the MindSpore adapter writes, a ``state``
record every 100 steps of an LLM-like model (BLOCKS decoder blocks), a hardware record
every 2 s of simulated time, an epoch record every 10,000 steps; a warm-up to the LR peak
over the first 2,000 steps. Each measurement runs in a fresh child process (imports done
before the clock starts): the pass over the log alone (``RunTail.read`` and ``lineage``),
then the whole constructor (``Monitor(..., resume=True)``: the pass, the records read back
and replayed through the rules). ROUNDS rounds each, the median shown, with msgspec and
with the standard ``json`` module (``MINDWATCH_JSON=json``).

    python benchmarks/resume_history.py [--steps 200000] [--blocks 24] [--rounds 3]

Measured (Python 3.11, msgspec 0.23, on 2 CPU cores shared with other jobs, load ~6: the
CPU time is the figure that holds; wall time was 1-2.5x it). 200,000 steps, 24 blocks:
213,024 lines, 173 MB (state records: 102 MB): with msgspec the pass 0.39 s of CPU, the
whole constructor 0.41 s (0.36-0.45 s wall on the quieter runs); with json 2.3 s of CPU for
either. No state records (``--blocks 0``): 211,022 lines, 71 MB: 0.27 s with msgspec, 2.3 s
with json. The child's peak RSS grew by 5-40 MB (the per-step arrays: 33 bytes a step line;
a chunk's lines and their decoded fields).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from views import write_rank  # a benchmark beside this one


def child(kind: str, run_dir: str) -> None:
    import io

    from mindwatch import Monitor
    from mindwatch.pipeline.resumed_history import steps_needed
    from mindwatch.runlog.run_tail import RunTail
    from mindwatch.settings import MonitorSettings
    path = os.path.join(run_dir, "rank_0.jsonl")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started, cpu = time.perf_counter(), time.process_time()
    if kind == "pass":
        tail = RunTail(path, steps=steps_needed(MonitorSettings()), states=20).read()
        lineage = tail.lineage()
        result = {"records": len(lineage.records), "lr_peak": lineage.lr_peak,
                  "last_step": lineage.last_step}
    else:
        monitor = Monitor(run_dir, resume=True, hardware_interval_s=None, stream=io.StringIO())
        result = {"last_step": monitor.last_step, "lr_limit": monitor.step_limits.lr}
    result["seconds"] = time.perf_counter() - started
    result["cpu_s"] = time.process_time() - cpu         # what a loaded host does not inflate
    result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    print(json.dumps(result))


def measure(kind: str, run_dir: str, standard: bool) -> dict:
    env = dict(os.environ)
    if standard:
        env["MINDWATCH_JSON"] = "json"
    done = subprocess.run([sys.executable, __file__, "--child", kind, run_dir], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--blocks", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "RUN_DIR"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as run_dir:
        path = os.path.join(run_dir, "rank_0.jsonl")
        write_rank(path, 0, 1, args.steps, args.blocks)
        with open(path, "rb") as handle:
            lines = sum(1 for _ in handle)
        print(f"{args.steps} steps, {args.blocks} blocks: {lines} lines, "
              f"{os.path.getsize(path) / 1e6:.0f} MB")
        for standard in (False, True):
            for kind in ("pass", "monitor"):
                results = [measure(kind, run_dir, standard) for _ in range(args.rounds)]
                seconds = statistics.median(r["seconds"] for r in results)
                cpu = statistics.median(r["cpu_s"] for r in results)
                rss = max(r["rss_mb"] for r in results)
                shown = {k: v for k, v in results[0].items()
                         if k not in ("seconds", "cpu_s", "rss_mb")}
                print(f"{'json' if standard else 'msgspec':8}{kind:8}{seconds:7.2f} s "
                      f"({cpu:.2f} s CPU)  +{rss:.0f} MB RSS  {shown}")


if __name__ == "__main__":
    main()
