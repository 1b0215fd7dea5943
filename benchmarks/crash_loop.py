"""Crash safety, again and again: a real MindSpore training process is SIGKILLed at random
moments, and after every kill its run directory must still read.

The trainer (this file, ``--train``) runs TrainMonitor + wrap on a small regressor and writes a
checkpoint every 3 steps through ``save_atomically`` (12 MB with Adam's state, ~40 ms to
write, so about half the training time is spent writing one), over three names in turn so
each write replaces an earlier file: kills land in log writes, in checkpoint writes and in
MindSpore's start-up alike. Every ``--segments``
iterations share one run directory (``resume=True``), so kills land in appended segments too.
With probability ``--tear`` the last line is also cut after the kill, as a power cut leaves a
file: SIGKILL alone cannot tear a line (each record is one ``write``), but the reader must
survive a torn line followed by appended segments, which this makes happen.

After each kill: every complete line of the log parses (``records.decode``) and is a complete
record, except the earlier torn tails (the writer starts the next record on a new line); every
``*.ckpt`` present loads with ``mindspore.load_checkpoint``, and the temporaries a kill leaves
(``*.tmp-<pid>.ckpt``, and MindSpore's own ``*.tmp-<pid>.tmp`` while it writes) are not taken
for checkpoints; ``mindwatch summary --json`` and ``mindwatch
report`` (real processes) and the watch view (rendered once) read the log without a traceback
and count exactly the lines that cannot be read. Prints a tally; exits 1 on any failure.

    python benchmarks/crash_loop.py [--iterations 100] [--seed 0] [--segments 5] [--tear 0.3]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

from mindwatch import records

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]
FINAL_CHECKPOINT = re.compile(r"(anomaly|signal)_step\d+_rank\d+\.ckpt")
CHECKPOINT_EVERY = 3
CHECKPOINT_NAMES = 3            # anomaly_step1..3_rank0.ckpt, overwritten in turn
WIDTH = 1024


def train(run_dir: str) -> None:
    """The process that gets killed: trains for far longer than any kill waits."""
    import mindspore as ms
    import numpy as np
    from mindspore import dataset as ds
    from mindspore import nn
    from mindspore.train import Callback

    from mindwatch.mindspore import TrainMonitor
    from mindwatch.mindspore.checkpoints.checkpoint import save_atomically

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(4, WIDTH), nn.GELU(), nn.Dense(WIDTH, WIDTH), nn.GELU(),
                            nn.Dense(WIDTH, 1))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True).astype(np.float32)
    dataset = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    monitor = TrainMonitor(run_dir, resume=True, print_interval=10**6)
    train_step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))

    class Checkpoints(Callback):
        def on_train_step_end(self, run_context):
            step = run_context.original_args().cur_step_num
            if step % CHECKPOINT_EVERY == 0:
                name = step // CHECKPOINT_EVERY % CHECKPOINT_NAMES + 1
                save_atomically(train_step, run_dir, name, 0, reason="anomaly")
            time.sleep(0.005)

    ms.train.Model(train_step).train(10**4, dataset, callbacks=[monitor, Checkpoints()],
                                     dataset_sink_mode=False)


@dataclass
class Tally:
    iterations: int = 0
    kills: int = 0
    kills_in_training: int = 0          # the kill came after this iteration's first step
    kills_in_checkpoint: int = 0        # a temporary of the killed process was left
    lines_checked: int = 0
    torn_lines: int = 0                 # distinct torn lines seen (by a kill or a cut)
    torn_in_middle_read: int = 0        # checks that read past a torn line in the middle
    checkpoints_loaded: int = 0
    temporaries_ignored: int = 0
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"crash loop: {self.iterations} iterations, {self.kills} kills "
                f"({self.kills_in_training} during training, {self.kills_in_checkpoint} during "
                f"a checkpoint write), {self.lines_checked} lines checked, {self.torn_lines} "
                f"torn lines ({self.torn_in_middle_read} reads past one in the middle), "
                f"{self.checkpoints_loaded} checkpoints loaded ({self.temporaries_ignored} "
                f"temporaries left by kills, ignored), {len(self.failures)} failures")


@dataclass
class RunDirState:
    fragments: set[int] = field(default_factory=set)    # offsets of lines torn earlier
    loaded: set[tuple] = field(default_factory=set)     # checkpoints already loaded


def _kill_once(run_dir: str, rng: random.Random, kill_after: tuple[float, float],
               work: str, tally: Tally, after_steps: int | None = None) -> int:
    """Starts the trainer, SIGKILLs it after a random delay; returns its pid. With
    ``after_steps`` (the run log's step records before this start) the delay counts from
    the segment's first step, not from the start, so that a slow host's imports and
    compilation (4 s and more when it is loaded) do not eat it and the kill lands in
    training."""
    err_path = os.path.join(work, "trainer.err")
    log = os.path.join(run_dir, "rank_0.jsonl")
    with open(err_path, "wb") as err:
        process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--train",
                                    run_dir], stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    while (after_steps is not None and process.poll() is None
           and time.monotonic() < deadline and _step_count(log) <= after_steps):
        time.sleep(0.02)
    time.sleep(rng.uniform(*kill_after))
    if process.poll() is not None:
        with open(err_path, "rb") as err:
            tail = err.read()[-1500:].decode(errors="replace")
        tally.failures.append(f"the trainer ended by itself ({process.returncode}): {tail}")
    else:
        process.send_signal(signal.SIGKILL)
        tally.kills += 1
    process.wait()
    return process.pid


def _cut_last_line(log: str, rng: random.Random) -> None:
    """A power cut: the last complete line loses its end (at least its closing brace)."""
    with open(log, "rb") as handle:
        data = handle.read()
    if not data.endswith(b"\n") or len(data) < 2:
        return
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    if len(data) - 1 - start >= 2:
        os.truncate(log, rng.randrange(start + 1, len(data) - 1))


def _check_log(log: str, state: RunDirState, tally: Tally) -> tuple[int, int, int]:
    """Every complete line parses, but known torn ones. Returns (records, bad complete
    lines, bad tail) as a reader must count them."""
    if not os.path.exists(log):
        return 0, 0, 0
    with open(log, "rb") as handle:
        data = handle.read()
    good = bad = offset = 0
    *complete, tail = data.split(b"\n")
    for number, raw in enumerate(complete, start=1):
        tally.lines_checked += 1
        try:
            problems = records.problems(records.decode(raw.decode("utf-8")))
            assert not problems, problems
            good += 1
        except (ValueError, AssertionError) as exc:
            if offset not in state.fragments:
                tally.failures.append(f"{log}, line {number}: not a record, not torn ({exc})")
            bad += 1
        offset += len(raw) + 1
    torn = 0
    if tail:
        try:
            records.decode(tail.decode("utf-8"))
            good += 1
        except ValueError:
            torn = 1
            if offset not in state.fragments:
                state.fragments.add(offset)
                tally.torn_lines += 1
    return good, bad, torn


def _check_views(run_dir: str, work: str, counts: tuple[int, int, int], tally: Tally) -> None:
    good, bad, torn = counts
    readable = good > 0 and bad + torn <= good
    summary = subprocess.run([*MINDWATCH, "summary", run_dir, "--json"], capture_output=True,
                             text=True, timeout=120)
    page = os.path.join(work, "report.html")
    report = subprocess.run([*MINDWATCH, "report", run_dir, "-o", page], capture_output=True,
                            text=True, timeout=120)
    for name, result in (("summary", summary), ("report", report)):
        expected = (1 if name == "summary" else 0) if readable else 2
        if result.returncode != expected or "Traceback" in result.stderr or (
                not readable and result.stderr.count("\n") != 1):
            tally.failures.append(f"{name} {run_dir}: exit {result.returncode}, expected "
                                  f"{expected}: {result.stderr[-1500:]}")
    if readable and summary.returncode == 1:
        rank = json.loads(summary.stdout)["ranks"][0]
        if rank["skipped_lines"] != bad + torn or rank["end"] != "running or crashed (no " \
                                                                  "end record)":
            tally.failures.append(f"summary {run_dir}: {rank['skipped_lines']} lines skipped, "
                                  f"expected {bad + torn}; end {rank['end']}")
        with open(page, encoding="utf-8") as handle:
            if (bad + torn > 0) != ('id="skipped"' in handle.read()):
                tally.failures.append(f"report {run_dir}: the skipped-lines note is wrong")
        tally.torn_in_middle_read += bad > 0
    _check_watch(run_dir, bad, readable, tally)


def _check_watch(run_dir: str, bad: int, readable: bool, tally: Tally) -> None:
    from rich.console import Console

    from mindwatch.report.watch import watch
    from mindwatch.runlog import RunLogError
    console = Console(file=io.StringIO(), width=160, force_terminal=False)
    try:
        code = watch(run_dir, console=console, refresh_s=0.01, timeout_s=0,
                     sleep=lambda _: None)
    except RunLogError as exc:
        if readable:
            tally.failures.append(f"watch {run_dir}: {exc}")
        return                       # else what summary said: not a run log
    except Exception:
        tally.failures.append(f"watch {run_dir}: {traceback.format_exc()[-1500:]}")
        return
    shown = " ".join(console.file.getvalue().split())
    said = f"{bad} unreadable line{'s' if bad > 1 else ''} skipped"
    if code != 1 or (bad > 0) != (said in shown):
        tally.failures.append(f"watch {run_dir}: exit {code}, expected 1 and {said!r}")


def _check_checkpoints(run_dir: str, pid: int, state: RunDirState, tally: Tally) -> None:
    folder = os.path.join(run_dir, "checkpoints")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for name in names:
        path = os.path.join(folder, name)
        if ".tmp-" in name:
            if FINAL_CHECKPOINT.fullmatch(name):
                tally.failures.append(f"{path}: a temporary named like a checkpoint")
            # Ours (.tmp-PID.ckpt, whole, not yet renamed) or MindSpore's own inside it
            # (.tmp-PID.tmp, being written): either way the killed process's.
            if re.search(rf"\.tmp-{pid}\.(ckpt|tmp)$", name):
                tally.kills_in_checkpoint += 1
                tally.temporaries_ignored += 1
            continue
        if not FINAL_CHECKPOINT.fullmatch(name):
            tally.failures.append(f"{path}: an unexpected file among the checkpoints")
            continue
        stat = os.stat(path)
        key = (name, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key in state.loaded:
            continue
        import mindspore as ms
        try:
            if not ms.load_checkpoint(path):
                raise ValueError("no parameters in it")
            state.loaded.add(key)
            tally.checkpoints_loaded += 1
        except Exception as exc:  # a checkpoint that does not load is the failure counted
            tally.failures.append(f"{path}: does not load ({type(exc).__name__}: {exc})")


def run(iterations: int = 100, seed: int = 0, segments: int = 5, tear: float = 0.3,
        work: str | None = None, kill_after: tuple[float, float] = (0.5, 6.0),
        progress: bool = False, keep: bool = False, from_log: bool = False) -> Tally:
    work = work or tempfile.mkdtemp(prefix="mindwatch-crash-")
    os.makedirs(work, exist_ok=True)
    rng, tally = random.Random(seed), Tally()
    states: dict[str, RunDirState] = {}
    for index in range(iterations):
        run_dir = os.path.join(work, f"run{index // segments}")
        state = states.setdefault(run_dir, RunDirState())
        log = os.path.join(run_dir, "rank_0.jsonl")
        steps_before = _step_count(log)
        pid = _kill_once(run_dir, rng, kill_after, work, tally,
                         steps_before if from_log else None)
        tally.iterations += 1
        tally.kills_in_training += _step_count(log) > steps_before
        if os.path.exists(log) and rng.random() < tear:
            _cut_last_line(log, rng)
        counts = _check_log(log, state, tally)
        _check_views(run_dir, work, counts, tally)
        _check_checkpoints(run_dir, pid, state, tally)
        if progress:
            print(f"[{index + 1}/{iterations}] {tally.line()}", flush=True)
        if not keep and (index + 1) % segments == 0:
            shutil.rmtree(run_dir)          # 12 MB checkpoints: keep the disk for the rest
    return tally


def _step_count(log: str) -> int:
    if not os.path.exists(log):
        return 0
    with open(log, "rb") as handle:
        return handle.read().count(b'"kind":"step"')


def main() -> int:
    if sys.argv[1:2] == ["--train"]:
        train(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--segments", type=int, default=5,
                        help="iterations that share one run directory (resume=True)")
    parser.add_argument("--tear", type=float, default=0.3,
                        help="probability of cutting the last line after a kill")
    parser.add_argument("--work", help="where the run directories go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep every run directory")
    args = parser.parse_args()
    tally = run(args.iterations, args.seed, args.segments, args.tear, args.work, progress=True,
                keep=args.keep)
    print(tally.line())
    for failure in tally.failures:
        print(f"FAILURE: {failure}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
