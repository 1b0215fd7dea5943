"""The trackers' tests run where their libraries are: make test-trackers runs this folder in
.venv-trackers (MindSpore and the three trackers) and tests/trackers/pytorch_paths in .venv-torch,
whose MLflow is the client alone: its server comes from MINDWATCH_TRACKER_SERVER_PYTHON (the
trackers' venv), which the Makefile names."""
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from free_port import free_port


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking server (SQLite store, artifacts on disk) on 127.0.0.1: its URL."""
    pytest.importorskip("mlflow", reason="report_to='mlflow' needs MLflow")
    python = os.environ.get("MINDWATCH_TRACKER_SERVER_PYTHON") or sys.executable
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = open(root / "server.log", "wb")     # noqa: SIM115 (the server's, closed below)
    process = subprocess.Popen(
        [python, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--artifacts-destination", str(root / "artifacts"), "--workers", "1"],
        stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                log.close()
                pytest.fail("mlflow server did not start: "
                            + (root / "server.log").read_text()[-2000:])
            time.sleep(0.5)
    yield url
    process.terminate()
    process.wait(30)
    log.close()
