"""W&B runs read back from their ``.wandb`` transaction logs with W&B's own reader,
``wandb leet inspect --json`` (wandb-core's, shipped with the ``wandb`` package: 0.31 has no
Python reader of the log), as TrackedRuns. Needs only ``wandb`` in the running interpreter
(.venv-trackers or .venv-torch), no account and no network."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from tracked import TrackedRun

STEP = "mindwatch/step"                       # the x-axis the sink logs every metric against
# W&B's state and the exit code the sink gives a stopped and a completed run
STOPPED, COMPLETED = "failed (exit code 143)", "finished (exit code 0)"
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def read_wandb(wandb_dir: str | os.PathLike) -> list[TrackedRun]:
    """Every run under ``wandb_dir`` (the ``dir`` given to the sink, or WANDB_DIR: the runs
    are in its ``wandb/`` folder), oldest first. Metrics: name -> [(mindwatch/step, value)] in
    the order logged (a rewound run's steps go back); status: "<W&B state> (exit code N)";
    files: the run files under ``mindwatch/``, by their names below it."""
    root = Path(wandb_dir) / "wandb"
    folders = [path for path in sorted(root.glob("*run-*")) if path.is_dir()
               and not path.is_symlink() and any(path.glob("run-*.wandb"))]
    assert folders, f"no W&B run under {root}"
    found = [_read(folder) for folder in folders]
    return [run for _, run in sorted(found, key=lambda pair: pair[0])]


def inspect(folder: Path, *flags: str) -> str:
    """``wandb leet inspect --json`` of one run folder: its stdout."""
    env = {**os.environ, "WANDB_ERROR_REPORTING": "false"}    # no telemetry: offline
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", *flags,
                           str(folder)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _read(folder: Path) -> tuple[tuple[str, float], TrackedRun]:
    summary = json.loads(inspect(folder, "--summary"))       # W&B's state, summary, config
    records = [json.loads(line) for line in inspect(folder).splitlines() if line.strip()]
    metrics: dict[str, list[tuple[int, float]]] = {}
    events, files = [], {}
    for record in records:
        kind = record.get("type")
        if kind == "history":
            item = record["history"]["item"]
            for name, value in item.items():
                number = _number(value)
                if name.startswith("_") or name == STEP or number is None:
                    continue
                metrics.setdefault(name, []).append((int(item[STEP]), number))
        elif kind == "alert":
            alert = record["alert"]
            events.append(f"[{alert.get('level')}] {alert.get('title')}: {alert.get('text')}")
        elif kind == "files":
            for entry in record["files"].get("files", []):
                path = entry["path"]
                if path.startswith("mindwatch/"):
                    files[path.removeprefix("mindwatch/")] = \
                        (folder / "files" / path).read_bytes()
    values = summary.get("summary") or {}
    config = {key: value if isinstance(value, str) else json.dumps(value)
              for key, value in (summary.get("config") or {}).items()}
    run = TrackedRun(name=summary.get("name"),
                     status=f"{summary.get('state')} (exit code {summary.get('exit_code')})",
                     verdict=values.get("mindwatch/verdict"),
                     end_reason=values.get("mindwatch/end_reason"), metrics=metrics,
                     config=config, events=events, files=files)
    return _when(summary["start_time"]), run


def _when(start: str) -> tuple[str, float]:
    """An RFC 3339 time ("2026-01-02T03:04:05.123456789Z") as a sort key, on any Python."""
    seconds, _, fraction = start.rstrip("Z").partition(".")
    return seconds, float(f"0.{fraction or 0}")


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return _NONFINITE.get(value) if isinstance(value, str) else None
