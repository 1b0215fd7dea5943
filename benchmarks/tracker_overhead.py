"""What a tracker costs the training loop (issue #45): the same healthy run, a CPU-bound step
of STEP_MS (numpy matmuls sized to take that long here), with and without
``report_to="mlflow"`` against a real MLflow server started here (SQLite store), side by side,
alternating, the median of each. The records go from the sink's own thread, so the step pays
only a queue put; the thread's CPU is the cost. To measure it, not the host's noise: the run
(its BLAS on one thread) and the sink's thread share CPU 0, so each microsecond the thread
takes is one the step waits; the server, which a real job has on another machine, runs on
CPU 1. Also the thread's own CPU per step (/proc's schedstat, nanoseconds), and both through
MLflow's client ``log_batch`` instead of mindwatch's JSON.

    .venv-trackers/bin/python benchmarks/tracker_overhead.py [--steps 300] [--rounds 3]

Needs MLflow (``make test-trackers`` builds the venv).
"""
from __future__ import annotations

import argparse
import io
import os

# before numpy starts its BLAS threads: one, on CPU 0 with the sink's thread (see above)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import psutil

from mindwatch import Monitor
from mindwatch.trackers.base import TrackerSink


def _server(root: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # on the other CPUs: a real tracking server runs on another machine
    others = set(range(os.cpu_count() or 1)) - os.sched_getaffinity(0) or None
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
         "--port", str(port), "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
         "--artifacts-destination", f"{root}/artifacts", "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=(lambda: os.sched_setaffinity(0, others)) if others else None)
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("mlflow server did not start")


def _sized(step_ms: float) -> int:
    """The matrix size whose two matmuls take ``step_ms`` here."""
    size = 64
    warm = np.ones((256, 256), np.float32)
    warm @ warm                 # the BLAS threads start once, outside the timing
    while True:
        a = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
        a @ a
        start = time.perf_counter()
        for _ in range(5):
            a @ a @ a
        took = (time.perf_counter() - start) / 5 * 1000
        if took >= step_ms or size > 4096:
            return size
        size = int(size * 1.1) + 1


def _run(directory: str, steps: int, size: int, report_to, client_path: bool = False
         ) -> tuple[float, float | None]:
    """Seconds per step of a run of ``steps`` steps (its own loop's time, close excluded), and
    the CPU seconds per step of the tracker's thread (None without one). ``client_path``:
    the metrics through MLflow's client ``log_batch`` instead of mindwatch's own JSON."""
    monitor = Monitor(directory, stream=io.StringIO(), hardware_interval_s=None,
                      report_to=report_to)
    trackers = [sink for sink in monitor.sinks if isinstance(sink, TrackerSink)]
    if client_path:
        for sink in trackers:
            sink._post = None
    a = np.random.default_rng(1).standard_normal((size, size)).astype(np.float32)
    settled = steps // 5        # the tracker's run started (its experiment, run, parameters)
    paused, before = 0.0, 0.0
    start = time.perf_counter()
    for step in range(1, steps + 1):
        loss = float((a @ a @ a)[0, 0] * 0.0) + 1.0 / step
        monitor.observe(step=step, loss=loss, lr=1e-3, grad_norm=1.0)
        if step == settled and trackers:
            waited = time.perf_counter()
            before = _thread_cpu(trackers)
            paused = time.perf_counter() - waited
    per_step = (time.perf_counter() - start - paused) / steps
    # the thread's CPU per step once its run started: what every further step costs
    cpu = (_thread_cpu(trackers) - before) / (steps - settled) if trackers else None
    monitor.close()
    return per_step, cpu


def _thread_cpu(trackers: list[TrackerSink]) -> float:
    """CPU seconds the trackers' threads used so far, once what was queued is delivered."""
    used = 0.0
    for sink in trackers:
        while sink.pending:
            time.sleep(0.001)
        if sink._thread is not None:
            used += _cpu_of(sink._thread.native_id)
    return used


def _cpu_of(thread_id: int) -> float:
    """A thread's CPU seconds: schedstat's nanoseconds where Linux has them (psutil's thread
    times count 10 ms ticks, coarser than what a few hundred steps cost)."""
    try:
        with open(f"/proc/self/task/{thread_id}/schedstat") as handle:
            return int(handle.read().split()[0]) / 1e9
    except OSError:
        return sum(t.user_time + t.system_time for t in psutil.Process().threads()
                   if t.id == thread_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--step-ms", type=float, nargs="*", default=[10.0, 100.0])
    args = parser.parse_args()
    sizes = {step_ms: _sized(step_ms) for step_ms in args.step_ms}   # before the server runs
    with tempfile.TemporaryDirectory() as root:
        process, url = _server(root)
        time.sleep(5.0)                 # its start-up done: its workers idle
        try:
            print("report_to='mlflow' against a real server: median seconds per step, and the "
                  "tracker thread's CPU per step (mindwatch's JSON; MLflow's client log_batch)")
            print(f"{'step':>8} {'without':>10} {'with mlflow':>12} {'ratio':>7} "
                  f"{'thread CPU':>11} {'client path':>12} {'ratio':>7} {'thread CPU':>11}")
            for step_ms in args.step_ms:
                size = sizes[step_ms]
                steps = max(100, int(args.steps * 10 / step_ms))
                runs: dict[str, list] = {"off": [], "on": [], "client": []}
                for round_ in range(args.rounds):
                    runs["off"].append(_run(f"{root}/off{step_ms}_{round_}", steps, size, None))
                    for name in ("on", "client"):
                        runs[name].append(_run(
                            f"{root}/{name}{step_ms}_{round_}", steps, size,
                            {"mlflow": {"tracking_uri": url, "experiment": "overhead"}},
                            client_path=name == "client"))
                off, on, client = (statistics.median(t for t, _ in runs[name])
                                   for name in ("off", "on", "client"))
                cpu_on, cpu_client = (statistics.median(c for _, c in runs[name]) * 1e6
                                      for name in ("on", "client"))
                print(f"{step_ms:>6.0f}ms {off * 1000:>8.2f}ms {on * 1000:>10.2f}ms "
                      f"{on / off:>7.3f} {cpu_on:>9.0f}us {client * 1000:>10.2f}ms "
                      f"{client / off:>7.3f} {cpu_client:>9.0f}us", flush=True)
        finally:
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
