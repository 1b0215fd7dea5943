"""Time of the job's views at scale (issue #43): ``mindwatch summary`` of a job of RANKS ranks
x STEPS steps from its ``job.jsonl`` alone, and, old against new, the summary of a job of
COPIES ranks whose only logs are rank logs (the condensed view).

The job log is generated on the fly into a temporary directory, as rank 0's JobLog writes it
(job/job_log.py; the same records, key order and number format, ``short``'s 7 significant
digits): the ``run`` record with every rank's host (8 ranks a host) and device, one
``job_step`` line per step with the four spreads (rank 2917 the slowest at 70% of the steps,
rank 1034 the one with the most data time at 60%, rank 3001 the largest memory), the
heatmap's ``job_ranks`` bins (job/rank_bins.py's spans: ~300 bins of RANKS values x 4
fields), EVENTS events (stragglers, a gradient spike withheld and replayed, a NaN that stops
the job at its last step) and the ``end`` with the goodput. Lines are formatted from numpy
columns with str templates and tables of number texts, so that 100 MB take seconds to write.
It is summarised without any rank log beside it, then with a short rank log per rank (of
which the summary reads the last block: which ranks went silent).

The rank-log copy: one rank's log (COPY_STEPS steps, one NaN on rank 13, the others
stopping after it as peers) written with ``records.encode``, copied to COPIES ranks with the
rank number changed. "old" is the per-rank summary (``summarize`` + ``render_text``, as
``mindwatch summary`` printed every multi-rank run before the job view); "new" is the
command as it runs now. Each timing is a fresh child process (imports included), the median
of ROUNDS; the lines printed are counted.

    python benchmarks/job_views.py [--ranks 4096] [--steps 200000] [--copies 1024]
                                   [--copy-steps 200] [--rounds 3] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from operator import itemgetter

import numpy as np

from mindwatch import records
from mindwatch.basics.rank_set import rank_set
from mindwatch.job_schema import bin_spans

SUMMARY_GOAL_S = 2.0
START = 1_700_000_000.0
STEP_S = 0.12
PER_HOST = 8
SLOW, DATA_HEAVY, LARGEST = 2917, 1034, 3001
SPREAD = ('{"min":%.7g,"min_rank":%d,"median":%.7g,"max":%.7g,"max_rank":%d}')
STEP_LINE = ('{"kind":"job_step","rank":0,"time":%.17g,"step":%d,"loss":%s,"grad_norm":%.7g,'
             '"step_time_s":' + SPREAD + ',"data_time_s":' + SPREAD
             + ',"local_grad_norm":' + SPREAD + ',"memory_mb":' + SPREAD
             + ',"skipped":%s,"ranks":%s}\n')
# Number texts by the hundred-thousandth, looked up instead of formatted (bins: 5M values)
TEXTS = [f"{k / 100_000:.5f}".rstrip("0").rstrip(".") if k else "0.0" for k in range(400_000)]


def _run_record(ranks: int, steps: int) -> dict:
    hosts = [{"host": f"node-{h:04d}", "ranks": rank_set(range(h * PER_HOST, min(ranks, (h + 1)
                                                                                 * PER_HOST))),
              "devices": list(range(min(PER_HOST, ranks - h * PER_HOST)))}
             for h in range(-(-ranks // PER_HOST))]
    return {"kind": "run", "rank": 0, "time": START, "schema": 1, "world_size": ranks,
            "host": "node-0000", "pid": 4000, "config": {"on_anomaly": "warn"},
            "versions": {"mindwatch": "0.1.0", "mindspore": "2.10.0", "python": "3.11.7"},
            "log_path": "rank_0.jsonl", "argv": ["train.py"], "total_steps": steps,
            "hosts": hosts}


def events(ranks: int, steps: int) -> dict[int, dict]:
    """step -> the event record's fields (job/events.py's)."""
    def place(rank: int) -> dict:
        return {"origin_rank": rank, "origin_host": f"node-{rank // PER_HOST:04d}",
                "origin_device": rank % PER_HOST}

    slow, spike, last = SLOW % ranks, 77 % ranks, steps
    found = {s: {"kinds": ["straggler"], "ranks": str(slow), "rank_count": 1, **place(slow),
                 "actions": ["warn"], "message": f"rank {slow} waits for data",
                 "report": None, "checkpoint": None}
             for s in (steps // 10 * k for k in range(1, 8))}
    found[steps * 3 // 4] = {
        "kinds": ["gradient_explode", "grad_spike"], "ranks": str(spike), "rank_count": 1,
        **place(spike), "actions": ["skip"], "message": "global gradient norm 7.6e+05 > 100",
        "report": "anomalies/step_rank0.json", "checkpoint": None,
        "replay_verdict": "computed again it came out bit-identical: a fault of the data"}
    found[last] = {"kinds": ["loss_nonfinite"], "ranks": str(3333 % ranks), "rank_count": 1,
                   **place(3333 % ranks), "actions": ["checkpoint", "stop"],
                   "message": f"rank {3333 % ranks} stopped the run", "report": None,
                   "checkpoint": "checkpoints/anomaly_step_rank0.ckpt"}
    return found


def write_job(path: str, ranks: int, steps: int) -> int:
    """The job log of a ``ranks`` x ``steps`` job; returns its size in bytes."""
    rng = np.random.default_rng(0)
    at = np.arange(1, steps + 1)
    times = START + at * STEP_S
    loss = 3.0 / (1 + at / 20_000) + 0.01 * rng.random(steps)
    norm = 1.0 + rng.random(steps)

    def spread(base: float, width: float, top: int, share: float) -> list:
        low = base * (1 - width * rng.random(steps))
        high = base * (1 + width * (1 + rng.random(steps)))
        top_rank = np.where(rng.random(steps) < share, top % ranks,
                            rng.integers(0, ranks, steps))
        return [low.tolist(), rng.integers(0, ranks, steps).tolist(),
                (base * (1 + 0.01 * rng.random(steps))).tolist(), high.tolist(),
                top_rank.tolist()]

    columns = [times.tolist(), at.tolist(), loss.tolist(), norm.tolist(),
               *spread(STEP_S, 0.05, SLOW, 0.7), *spread(0.002, 0.5, DATA_HEAVY, 0.6),
               *spread(0.5, 0.2, 0, 0.0), *spread(60_000.0, 0.02, LARGEST, 1.0)]
    found = events(ranks, steps)
    starts = bin_spans(steps)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(records.encode(_run_record(ranks, steps)) + "\n")
        lines = []
        next_bin = 0
        for row in zip(*columns, strict=True):
            step = row[1]
            event = found.get(step)
            values = list(row)
            values[2] = '"NaN"' if event and "loss_nonfinite" in event["kinds"] else \
                f"{row[2]:.7g}"
            lines.append(STEP_LINE % (*values, "true" if event and "skip" in event["actions"]
                                      else "false",
                                      f'"{event["ranks"]}"' if event else "null"))
            if next_bin < len(starts) and step == starts[next_bin][1]:
                lines.append(_bin_line(rng, ranks, *starts[next_bin], row[0]))
                next_bin += 1
            if event:
                lines.append(records.encode({"kind": "event", "rank": 0, "time": row[0],
                                             "step": step, **event}) + "\n")
            if len(lines) > 20_000:
                handle.write("".join(lines))
                lines = []
        handle.write("".join(lines))
        lost = {"restart": 0.0, "startup": 120.0, "pause": 900.0, "withheld": 0.12,
                "replay": 0.3, "rewind": 0.0, "hang": 0.0, "straggler": 310.0, "shutdown": 4.0}
        wall = steps * STEP_S + 130.0
        handle.write(records.encode({
            "kind": "end", "rank": 0, "time": START + wall, "reason": "stopped",
            "steps": steps, "goodput": {"share": round(1 - sum(lost.values()) / wall, 6),
                                        "wall_s": wall,
                                        "productive_s": wall - sum(lost.values()),
                                        "lost_s": lost},
            "stopped_by": {"anomaly": "loss_nonfinite", "step": steps,
                           "rank": 3333 % ranks}}) + "\n")
    return os.path.getsize(path)


def _bin_line(rng: np.random.Generator, ranks: int, first: int, last: int,
              now: float) -> str:
    """A job_ranks line; values are table texts of hundred-thousandths."""
    def texts(base: float, scale: float, top: int, factor: float) -> str:
        units = np.clip((base * (1 + scale * rng.random(ranks))) * 100_000, 0, 399_999)
        units[top % ranks] = min(399_999, units[top % ranks] * factor)
        return ",".join(itemgetter(*units.astype(np.int64).tolist())(TEXTS))

    memory = ",".join(map(str, (60_000 + rng.integers(0, 1000, ranks)).tolist()))
    return (f'{{"kind":"job_ranks","rank":0,"time":{now:.17g},"step_from":{first},'
            f'"step":{last},"step_time_s":[{texts(STEP_S, 0.05, SLOW, 1.5)}],'
            f'"data_time_s":[{texts(0.002, 0.5, DATA_HEAVY, 4.0)}],'
            f'"local_grad_norm":[{texts(0.5, 0.3, 0, 1.0)}],"memory_mb":[{memory}]}}\n')


def write_copies(directory: str, ranks: int, steps: int) -> int:
    """A job of ``ranks`` rank logs without a job log: one log, copied with its rank
    changed. Rank 13 (when there is one) finds a NaN at the last step, the others stop as
    its peers. Returns the bytes written."""
    os.makedirs(directory, exist_ok=True)
    nan_rank = 13 % ranks
    total = 0
    for rank in range(ranks):
        lines = [records.encode({
            "kind": "run", "rank": rank, "time": START, "schema": 1, "world_size": ranks,
            "host": f"node-{rank // PER_HOST:04d}", "pid": 4000 + rank,
            "config": {"on_anomaly": "warn"},
            "versions": {"mindwatch": "0.1.0", "mindspore": None, "python": "3.11.7"}})]
        for step in range(1, steps + 1):
            loss = float("nan") if (rank, step) == (nan_rank, steps) else 3.0 / step
            lines.append(records.encode({
                "kind": "step", "rank": rank, "time": START + step * STEP_S, "step": step,
                "epoch": 1, "loss": loss, "loss_smooth": 3.0 / step, "lr": 1e-3,
                "grad_norm": 1.0, "step_time_s": STEP_S * (1.2 if rank == SLOW % ranks else 1),
                "skipped": False, "steps_covered": 1, "data_time_s": 0.001}))
        peer = rank != nan_rank
        lines.append(records.encode({
            "kind": "anomaly", "rank": rank, "time": START + steps * STEP_S,
            "anomaly": "peer_stop" if peer else "loss_nonfinite", "step": steps,
            "value": float(nan_rank) if peer else float("nan"), "threshold": None,
            "message": (f"rank {nan_rank} stopped the run at step {steps} (loss_nonfinite); "
                        "this rank stops after the same step") if peer else
            f"loss is nan at step {steps}", "actions": ["stop"], "checkpoint": None,
            "report": None}))
        lines.append(records.encode({
            "kind": "end", "rank": rank, "time": START + steps * STEP_S + 0.5,
            "reason": "stopped", "steps": steps, "elapsed_s": steps * STEP_S + 0.5,
            "error": None, "stopped_by": {"anomaly": "loss_nonfinite", "step": steps,
                                          "rank": nan_rank}}))
        with open(os.path.join(directory, f"rank_{rank}.jsonl"), "w",
                  encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
            total += handle.tell()
    return total


OLD = ("import sys; from mindwatch.report.summary import render_text, summarize; "
       "from mindwatch.runlog import NONE, read_run; "
       "print(render_text(summarize(read_run(sys.argv[1], states=NONE, charts=False))))")
NEW = "import sys; from mindwatch.cli import main; sys.exit(main(['summary', sys.argv[1]]))"


def timed(code: str, directory: str, rounds: int) -> tuple[float, str]:
    """The median wall time of ``code`` in a fresh process, and what it printed."""
    found, out = [], ""
    for _ in range(rounds):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code, directory], capture_output=True,
                              text=True, timeout=900)
        found.append(time.perf_counter() - start)
        out = done.stdout
        if done.returncode not in (0, 1):
            raise SystemExit(f"failed ({done.returncode}): {done.stderr.strip()}")
    return statistics.median(found), out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--copies", type=int, default=1024)
    parser.add_argument("--copy-steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="write into DIR and leave it there")
    args = parser.parse_args(argv)
    root = args.keep or tempfile.mkdtemp(prefix="mindwatch-job-views-")
    job_dir, copies_dir = os.path.join(root, "job"), os.path.join(root, "copies")
    os.makedirs(job_dir, exist_ok=True)
    start = time.perf_counter()
    size = write_job(os.path.join(job_dir, "job.jsonl"), args.ranks, args.steps)
    print(f"job.jsonl: {args.ranks} ranks x {args.steps} steps, {size / 2**20:.0f} MiB, "
          f"written in {time.perf_counter() - start:.1f} s")
    from mindwatch.runlog.job import read as job_read
    from mindwatch.runlog.job.view import read_job
    job_read._fast()                                 # msgspec's Structs, built once
    start = time.perf_counter()
    read_job(job_dir, bins=False)
    plain_s = time.perf_counter() - start
    start = time.perf_counter()
    view = read_job(job_dir)
    print(f"read_job (in this process): {plain_s:.2f} s without the bins (the summary's), "
          f"{time.perf_counter() - start:.2f} s with them ({len(view.bins) if view else 0})")
    seconds, out = timed(NEW, job_dir, args.rounds)
    print(f"summary of job.jsonl: {seconds:.2f} s (goal {SUMMARY_GOAL_S} s, "
          f"{'met' if seconds <= SUMMARY_GOAL_S else 'MISSED'}), "
          f"{len(out.splitlines())} lines:")
    print("    " + out.rstrip().replace("\n", "\n    "))
    # Beside it, a short rank log per rank: the summary reads the last block of each (its
    # silent ranks), never more
    write_copies(job_dir, args.ranks, 10)
    seconds, out = timed(NEW, job_dir, args.rounds)
    print(f"  the same with {args.ranks} rank logs beside it: {seconds:.2f} s, "
          f"{len(out.splitlines())} lines")
    size = write_copies(copies_dir, args.copies, args.copy_steps)
    print(f"rank-log copies: {args.copies} ranks x {args.copy_steps} steps, "
          f"{size / 2**20:.0f} MiB, no job.jsonl")
    for label, code in (("old", OLD), ("new", NEW)):
        seconds, out = timed(code, copies_dir, args.rounds)
        lines = out.splitlines()
        print(f"  {label} summary: {seconds:.2f} s, {len(lines)} lines, "
              f"{max(map(len, lines), default=0)} characters in the longest")
    print("    " + out.rstrip().replace("\n", "\n    "))
    print(json.dumps({"root": root}) if args.keep else "", end="")
    if not args.keep:
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
