"""Time of ``mindwatch report`` on a job of 4096 ranks x 200k steps (issue #43), and the page's
size: the job page (report/job/page.py) reads job.jsonl and the named ranks' logs,
never the other ranks'. Goal: within 10 s on the 2-CPU machine, the page a few MB.

The job is generated on the fly into a temporary directory, fast (line templates, numpy for
the values): rank 0's job.jsonl with the run record (512 hosts of 8 devices), STEPS
``job_step`` lines (~450 bytes each), the ``job_ranks`` bins as job/rank_bins.py cuts them
(~300 bins of RANKS values of 4 fields, ~40 MB), EVENTS events (each a rank's NaN local
gradient norm, that rank its origin, the NaN in its bin), and the end record with goodput;
then the rank logs of the ranks the page names (the events' origins, the rank most often
slowest, the one most often using the most memory), STEPS step records each with a
hardware record every 20 steps, through the same kind of templates. No other rank log is
written: the page must not need them.

Printed: the generation time and sizes, then the report's time (the median of ROUNDS runs,
each in a fresh child process, as the command runs: imports included) with its parts
(``read_job``, the named logs, the page), and the page's size.

    python benchmarks/job_report.py [--ranks 4096] [--steps 200000] [--rounds 3]
                                    [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

GOAL_S = 10.0
START = 1_700_000_000.0
SLOW_RANK, MEMORY_RANK = 2049, 3001     # most often slowest / most memory (scaled to --ranks)
EVENTS = 3


def _spread(low: float, low_rank: int, median: float, high: float, high_rank: int) -> str:
    return (f'{{"min":{low:.7g},"min_rank":{low_rank},"median":{median:.7g},'
            f'"max":{high:.7g},"max_rank":{high_rank}}}')


def write_job(directory: str, ranks: int, steps: int, seed: int = 0) -> list[int]:
    """job.jsonl of a ``ranks`` x ``steps`` job; returns the events' origin ranks."""
    rng = np.random.default_rng(seed)
    slow, memory = SLOW_RANK % ranks, MEMORY_RANK % ranks
    origins = [int(r) for r in rng.choice(ranks, EVENTS, replace=False)]
    event_steps = sorted(int(s) for s in rng.choice(np.arange(100, steps), EVENTS,
                                                    replace=False))
    by_step = dict(zip(event_steps, origins, strict=True))
    hosts = [{"host": f"node-{h}", "ranks": f"{h * 8}-{min(h * 8 + 8, ranks) - 1}",
              "devices": list(range(min(8, ranks - h * 8)))} for h in range(-(-ranks // 8))]
    run = {"kind": "run", "rank": 0, "time": START, "schema": 1, "world_size": ranks,
           "host": "node-0", "pid": 4000, "hosts": hosts,
           "config": {"grad_explode": 100.0, "grad_vanish": 1e-6},
           "versions": {"mindwatch": "0.1.0"}, "argv": ["train.py"]}
    step_time = 0.1 + 0.01 * rng.random(steps)
    slowest = np.where(rng.random(steps) < 0.6, slow, rng.integers(0, ranks, steps))
    largest = np.where(rng.random(steps) < 0.8, memory, rng.integers(0, ranks, steps))
    lows = rng.integers(0, ranks, steps)
    loss = 3.0 / (1 + np.arange(steps) / 20_000) + 0.01 * rng.random(steps)
    now = START + np.cumsum(step_time * 1.05)
    path = os.path.join(directory, "job.jsonl")
    from mindwatch.job_schema import bin_spans

    bins = bin_spans(steps)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(run, separators=(",", ":")) + "\n")
        lines = []
        next_bin = 0
        for i in range(steps):
            step, t = i + 1, step_time[i]
            origin = by_step.get(step)
            lines.append(
                f'{{"kind":"job_step","rank":0,"time":{now[i]:.3f},"step":{step},'
                f'"loss":{loss[i]:.7g},"grad_norm":{1.5 + t:.7g},'
                f'"step_time_s":{_spread(t * 0.9, int(lows[i]), t, t * 1.3, int(slowest[i]))},'
                f'"data_time_s":{_spread(0.001, int(lows[i]), 0.002, 0.01, int(slowest[i]))},'
                '"local_grad_norm":' + (
                    '{"min":0.9,"min_rank":7,"median":1.2,"max":2.5,"max_rank":11,'
                    f'"nonfinite":"{origin}"}}' if origin is not None else
                    _spread(0.9, 7, 1.2, 1.9 + t, 11)) + ','
                f'"memory_mb":{_spread(30000, int(lows[i]), 31000, 32000, int(largest[i]))},'
                f'"skipped":false,"ranks":{json.dumps(None if origin is None else str(origin))}}}')
            if origin is not None:
                lines.append(json.dumps({
                    "kind": "event", "rank": 0, "time": now[i], "step": step,
                    "kinds": ["gradient_nonfinite"], "ranks": str(origin), "rank_count": 1,
                    "origin_rank": origin, "origin_host": f"node-{origin // 8}",
                    "origin_device": origin % 8, "actions": ["skip"],
                    "message": f"local gradient norm nan on rank {origin}", "report": None,
                    "checkpoint": None}, separators=(",", ":")))
            if next_bin < len(bins) and step == bins[next_bin][1]:
                lines.append(_bin_line(rng, bins[next_bin], now[i], ranks, slow, memory,
                                       by_step))
                next_bin += 1
            if len(lines) >= 5000:
                handle.write("\n".join(lines) + "\n")
                lines = []
        lines.append(json.dumps({
            "kind": "end", "rank": 0, "time": now[-1], "reason": "completed", "steps": steps,
            "stopped_by": None, "goodput": {
                "share": 0.95, "wall_s": now[-1] - START, "productive_s": 0.95 * (now[-1] - START),
                "lost_s": {"startup": 0.05 * (now[-1] - START)}}}, separators=(",", ":")))
        handle.write("\n".join(lines) + "\n")
    return origins


def _bin_line(rng, span: tuple[int, int], now: float, ranks: int, slow: int, memory: int,
              events: dict[int, int]) -> str:
    step_time = np.round(0.1 + 0.01 * rng.random(ranks), 6)
    step_time[slow] *= 1.3
    data_time = np.round(0.002 * rng.random(ranks), 6)
    norms = np.round(1.0 + rng.random(ranks), 6)
    memory_mb = np.round(30_000 + 2000 * rng.random(ranks), 3)
    memory_mb[memory] = 32_000.0
    values = {name: ",".join(map(repr, column.tolist())) for name, column in (
        ("step_time_s", step_time), ("data_time_s", data_time), ("memory_mb", memory_mb))}
    norm_text = list(map(repr, norms.tolist()))
    for step, origin in events.items():
        if span[0] <= step <= span[1]:
            norm_text[origin] = '"NaN"'
    return (f'{{"kind":"job_ranks","rank":0,"time":{now:.3f},"step_from":{span[0]},'
            f'"step":{span[1]},"step_time_s":[{values["step_time_s"]}],'
            f'"data_time_s":[{values["data_time_s"]}],'
            f'"local_grad_norm":[{",".join(norm_text)}],"memory_mb":[{values["memory_mb"]}]}}')


def write_rank_log(directory: str, rank: int, ranks: int, steps: int) -> None:
    """A rank's log: run record, a step record per step, hardware every 20 steps, end."""
    rng = np.random.default_rng(rank)
    step_time = 0.1 + 0.01 * rng.random(steps)
    loss = 3.0 / (1 + np.arange(steps) / 20_000) + 0.05 * rng.random(steps)
    now = START + np.cumsum(step_time)
    path = os.path.join(directory, f"rank_{rank}.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps({
            "kind": "run", "rank": rank, "time": START, "schema": 1, "world_size": ranks,
            "host": f"node-{rank // 8}", "pid": 4000 + rank, "config": {},
            "versions": {"mindwatch": "0.1.0"}}, separators=(",", ":")) + "\n")
        lines = []
        smooth = loss[0]
        for i in range(steps):
            smooth = 0.9 * smooth + 0.1 * loss[i]
            lines.append(
                f'{{"kind":"step","rank":{rank},"time":{now[i]:.3f},"step":{i + 1},"epoch":1,'
                f'"loss":{loss[i]:.7g},"loss_smooth":{smooth:.7g},"lr":0.0003,'
                f'"grad_norm":{1.5 + step_time[i]:.7g},"step_time_s":{step_time[i]:.6f},'
                f'"skipped":false,"steps_covered":1,"samples_per_s":{32 / step_time[i]:.5g},'
                f'"data_time_s":0.002}}')
            if i % 20 == 19:
                lines.append(
                    f'{{"kind":"hardware","rank":{rank},"time":{now[i]:.3f},'
                    '"cpu_percent":50.0,"mem_used_gb":200.0,"mem_available_gb":800.0,'
                    '"rss_gb":12.5,"devices":[{"type":"npu","index":' f"{rank % 8}"
                    ',"util_percent":90.0,"mem_used_mb":31000.0,"mem_total_mb":65536.0,'
                    '"temp_c":60.0,"power_w":300.0}],"framework_memory":null}')
            if len(lines) >= 5000:
                handle.write("\n".join(lines) + "\n")
                lines = []
        lines.append(json.dumps({"kind": "end", "rank": rank, "time": now[-1],
                                 "reason": "completed", "steps": steps,
                                 "elapsed_s": now[-1] - START, "error": None,
                                 "stopped_by": None}, separators=(",", ":")))
        handle.write("\n".join(lines) + "\n")


def generate(directory: str, ranks: int, steps: int) -> list[int]:
    """The job log, then the named ranks' logs; returns those ranks."""
    origins = write_job(directory, ranks, steps)
    named = sorted({*origins, SLOW_RANK % ranks, MEMORY_RANK % ranks})
    for rank in named:
        write_rank_log(directory, rank, ranks, steps)
    return named


def child(directory: str) -> None:
    """One report as the command makes it, in this fresh process: prints JSON timings."""
    started = time.perf_counter()
    from mindwatch.report.job import page as job_charts_page
    from mindwatch.report.job.charts import named_ranks
    from mindwatch.runlog.job.view import read_job
    imported = time.perf_counter()
    output = os.path.join(directory, "report.html")
    path = job_charts_page.write_job_report(directory, output)
    done = time.perf_counter()
    assert path == output, "no job page"
    # the parts, timed again apart (a second pass, warm caches: indicative only)
    t0 = time.perf_counter()
    view = read_job(directory)
    t1 = time.perf_counter()
    assert view is not None
    logs = job_charts_page.read_named_logs(directory, list(named_ranks(view)))
    t2 = time.perf_counter()
    job_charts_page.render_job_html(view, logs)
    t3 = time.perf_counter()
    print(json.dumps({"total_s": done - started, "imports_s": imported - started,
                      "read_job_s": t1 - t0, "named_logs_s": t2 - t1, "page_s": t3 - t2,
                      "named": sorted(logs), "bytes": os.path.getsize(output)}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it")
    parser.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    directory = args.keep or tempfile.mkdtemp(prefix="mindwatch-job-report-")
    os.makedirs(directory, exist_ok=True)
    try:
        started = time.perf_counter()
        named = generate(directory, args.ranks, args.steps)
        job_mb = os.path.getsize(os.path.join(directory, "job.jsonl")) / 2**20
        print(f"generated {args.ranks} ranks x {args.steps} steps in "
              f"{time.perf_counter() - started:.1f} s: job.jsonl {job_mb:.0f} MB, "
              f"rank logs of ranks {named}")
        results = []
        for _ in range(args.rounds):
            out = subprocess.run([sys.executable, __file__, "--child", directory],
                                 capture_output=True, text=True, check=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        best = sorted(results, key=lambda r: r["total_s"])[len(results) // 2]
        total = statistics.median(r["total_s"] for r in results)
        print(f"report: {total:.2f} s (median of {args.rounds}; goal {GOAL_S:.0f} s"
              f"{'' if total <= GOAL_S else ', MISSED'}): imports {best['imports_s']:.2f} s, "
              f"read_job {best['read_job_s']:.2f} s, named ranks' logs "
              f"{best['named_logs_s']:.2f} s ({len(best['named'])} ranks), page "
              f"{best['page_s']:.2f} s; page {best['bytes'] / 2**20:.2f} MB")
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
