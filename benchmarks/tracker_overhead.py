"""What a tracker costs the training loop (issue #45): the same healthy run, a CPU-bound step
of STEP_MS (numpy matmuls sized to take that long here), with and without
``report_to="mlflow"`` against a real MLflow server started here (SQLite store), side by side,
alternating, the median of each. The records go from the sink's own thread, so the step pays
only a queue put; the server's work shares the host's cores, which a real server would not.

    .venv-trackers/bin/python benchmarks/tracker_overhead.py [--steps 300] [--rounds 3]

Needs MLflow (``make test-trackers`` builds the venv).
"""
from __future__ import annotations

import argparse
import io
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

from mindwatch import Monitor


def _server(root: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # at the lowest priority: a real tracking server runs on another machine, here it shares
    # the two cores with the step (the sink's own thread still does)
    process = subprocess.Popen(
        ["nice", "-n", "19", sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
         "--port", str(port), "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
         "--artifacts-destination", f"{root}/artifacts", "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def _run(directory: str, steps: int, size: int, report_to) -> float:
    """Seconds per step of a run of ``steps`` steps (its own loop's time, close excluded)."""
    monitor = Monitor(directory, stream=io.StringIO(), hardware_interval_s=None,
                      report_to=report_to)
    a = np.random.default_rng(1).standard_normal((size, size)).astype(np.float32)
    start = time.perf_counter()
    for step in range(1, steps + 1):
        loss = float((a @ a @ a)[0, 0] * 0.0) + 1.0 / step
        monitor.observe(step=step, loss=loss, lr=1e-3, grad_norm=1.0)
    per_step = (time.perf_counter() - start) / steps
    monitor.close()
    return per_step


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
            print("report_to='mlflow' against a real server, median seconds per step")
            print(f"{'step':>8} {'without':>10} {'with mlflow':>12} {'ratio':>7}")
            for step_ms in args.step_ms:
                size = sizes[step_ms]
                steps = max(30, int(args.steps * 10 / step_ms))
                off, on = [], []
                for round_ in range(args.rounds):
                    off.append(_run(f"{root}/off{step_ms}_{round_}", steps, size, None))
                    on.append(_run(f"{root}/on{step_ms}_{round_}", steps, size,
                                   {"mlflow": {"tracking_uri": url,
                                               "experiment": "overhead"}}))
                without, with_ = statistics.median(off), statistics.median(on)
                print(f"{step_ms:>6.0f}ms {without * 1000:>8.2f}ms {with_ * 1000:>10.2f}ms "
                      f"{with_ / without:>7.3f}")
        finally:
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
