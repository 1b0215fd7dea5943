"""The screenshot in docs/trackers.md: a run stopped by a NaN loss, as the MLflow UI shows it.
Starts an MLflow server (SQLite store, 127.0.0.1), trains a small MindSpore model with
``report_to="mlflow"`` until a NaN batch stops it, opens the run's page in headless Chromium
and writes docs/images/mlflow-stopped-run.png (the run: its status, verdict and anomaly tags)
and docs/images/mlflow-stopped-run-metrics.png (its charts).

    .venv-trackers/bin/python docs/screenshot_trackers.py      (make test-trackers builds it)
"""
from __future__ import annotations

import io
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "images" / "mlflow-stopped-run.png"
CHARTS = HERE / "images" / "mlflow-stopped-run-metrics.png"


def _server(root: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
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


def _train(log_dir: str, url: str) -> None:
    """The docs' Model.train, a NaN batch at step 40 of 64."""
    import mindspore as ms
    import numpy as np
    from mindspore import dataset as ds
    from mindspore import nn

    from mindwatch.mindspore import TrainMonitor

    ms.set_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 4)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
    x[39 * 8:40 * 8] = np.nan
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    net = nn.SequentialCell(nn.Dense(4, 32), nn.GELU(), nn.Dense(32, 1))
    monitor = TrainMonitor(log_dir, stream=io.StringIO(), hardware_interval_s=None,
                           report_to={"mlflow": {"tracking_uri": url,
                                                 "experiment": "llama-sft"}})
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params(), 1e-2))
    ms.train.Model(step).train(1, data, callbacks=[monitor], dataset_sink_mode=False)


def main() -> None:
    from mlflow.tracking import MlflowClient

    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                    "google-chrome"))), None)
    if browser is None:
        raise SystemExit("needs headless Chromium (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as root:
        process, url = _server(root)
        try:
            _train(f"{root}/runs/exp1", url)
            client = MlflowClient(tracking_uri=url)
            experiment = client.get_experiment_by_name("llama-sft")
            [run] = client.search_runs([experiment.experiment_id])
            page = f"{url}/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}"
            OUTPUT.parent.mkdir(exist_ok=True)
            for address, output, size in ((page, OUTPUT, "1400,1000"),
                                          (f"{page}/model-metrics", CHARTS, "1400,2400")):
                subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox",
                                "--hide-scrollbars", f"--user-data-dir={root}/profile",
                                f"--window-size={size}", "--virtual-time-budget=60000",
                                f"--screenshot={output}", address], check=True,
                               capture_output=True, timeout=180)
        finally:
            process.terminate()
            process.wait(30)
    print(OUTPUT, CHARTS)


if __name__ == "__main__":
    main()
