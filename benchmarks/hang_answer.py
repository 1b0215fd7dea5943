"""The job's answer to a hang at fleet sizes (issue #44): what the answering rank spends once
every rank's heartbeat is on disk, and what the heartbeats cost the file system.

For each size, N heartbeat files are written as the ranks' heartbeat threads write them
(background/heartbeat.py: JSON, a temporary name, then a rename), one rank stuck in its data
loader before step 30 and the others in step 30's collective; then the answering rank's work
is timed: one read of every heartbeat (runlog/heartbeats.py ``read_beats``, which the answer
repeats while it waits for them to catch up) and the answer itself (job/holders.py).

    python benchmarks/hang_answer.py [--ranks 8 4096 16384] [--dir PATH]

``--dir`` on a shared file system measures what the answer costs there (a local disk here).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from mindwatch.basics.run_dir import write_text_atomically
from mindwatch.job.holders import answer
from mindwatch.runlog import heartbeats as hb

NOW = 1_800_000_000.0
HOLDER = 6


def _beat(rank: int) -> dict:
    stuck = rank == HOLDER
    return {hb.RANK: rank, hb.HOST: f"node-{rank // 8}", hb.DEVICE: rank % 8, hb.PID: 1000 + rank,
            hb.TIME: NOW - 0.5, hb.INTERVAL_S: 30.0,
            hb.PHASE: hb.BEFORE_STEP if stuck else hb.IN_STEP, hb.STEP: 30,
            hb.SINCE: NOW - 700, hb.STATE: hb.STALLED,
            hb.WHERE: "__getitem__ (data.py:40) <- fetch (fetch.py:54)" if stuck
            else "_exec_pip (api.py:2432) <- run (api.py:2452)",
            hb.DATA_LOADER: stuck}


def _timed(action, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[8, 4096, 16384])
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    print("the hang answer over N heartbeats (median of 5; a local disk unless --dir)")
    print(f"{'ranks':>6} {'write all (s)':>14} {'per beat (ms)':>14} {'read all (s)':>13} "
          f"{'answer (s)':>11}  named")
    for count in args.ranks:
        with tempfile.TemporaryDirectory(dir=args.dir) as log_dir:
            os.makedirs(hb.directory(log_dir))
            texts = [json.dumps(_beat(rank)) for rank in range(count)]
            start = time.perf_counter()
            for rank, text in enumerate(texts):
                write_text_atomically(hb.beat_path(log_dir, rank), text)
            written = time.perf_counter() - start
            read_s, beats = _timed(lambda d=log_dir: hb.read_beats(d), 5)
            answer_s, found = _timed(lambda b=beats, n=count: answer(b, n, now=NOW, step=29), 5)
            print(f"{count:>6} {written:>14.3f} {written / count * 1000:>14.3f} "
                  f"{read_s:>13.3f} {answer_s:>11.3f}  {found['waiting_for']} "
                  f"({found['waiting'][0]['count']} waiting)")


if __name__ == "__main__":
    main()
