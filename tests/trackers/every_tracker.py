"""The three trackers as the path tests use them: the ``report_to`` options of a run of
``experiment`` (MLflow: on the session's server; SwanLab and W&B: offline, under the test's
directory), its run read back with that tracker's own reader, and the words each tracker
ends a stopped and a completed run with."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tracked import TrackedRun

NAMES = ("mlflow", "swanlab", "wandb")


@dataclass
class Tracker:
    name: str
    options: Callable[[str], dict[str, Any]]          # experiment -> report_to's options
    read: Callable[[str], TrackedRun]                 # experiment -> its one run
    stopped: str
    completed: str

    def report_to(self, experiment: str) -> dict[str, Any]:
        return {self.name: self.options(experiment)}


def tracker_for(request: pytest.FixtureRequest, name: str, where: Path) -> Tracker:
    pytest.importorskip(name, reason=f"report_to={name!r} needs its package")
    if name == "mlflow":
        import read_mlflow
        server = request.getfixturevalue("mlflow_server")

        def read_one(experiment: str) -> TrackedRun:
            [run] = read_mlflow.read_mlflow(server, experiment)
            return run
        return Tracker(name, lambda e: {"tracking_uri": server, "experiment": e}, read_one,
                       read_mlflow.STOPPED, read_mlflow.COMPLETED)
    if name == "swanlab":
        import read_swanlab
        return Tracker(name, lambda e: {"mode": "offline", "project": e,
                                        "logdir": str(where / "swanlog" / e)},
                       lambda e: read_swanlab.read_swanlab(where / "swanlog" / e),
                       read_swanlab.STOPPED, read_swanlab.COMPLETED)
    import read_wandb

    def read_wandb_one(experiment: str) -> TrackedRun:
        [run] = read_wandb.read_wandb(where / "wandb" / experiment)
        return run
    return Tracker(name, lambda e: {"mode": "offline", "project": e,
                                    "dir": str(where / "wandb" / e)}, read_wandb_one,
                   read_wandb.STOPPED, read_wandb.COMPLETED)
