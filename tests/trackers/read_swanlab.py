"""SwanLab runs read back as TrackedRuns from SwanLab's own offline record: the
``backup.swanlab`` file of each ``run-<time>-<id>`` folder (what ``swanlab sync`` uploads),
scanned with SwanLab's ``DataStore`` and ``ModelsParser``, and the run's ``files/config.yaml``.
Needs SwanLab alone (no MindSpore, no mindwatch): usable from .venv-trackers and .venv-torch.
Offline, local and cloud modes all write that file (cloud: unless ``backup`` is off)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import yaml
from tracked import TrackedRun

STOPPED, COMPLETED = "CRASHED", "SUCCESS"     # what a stopped and a completed run end as
RUNNING = "RUNNING"                           # no end written: SwanLab never finished it
ANOMALIES, FILES = "mindwatch/anomalies", "mindwatch/files"
_NUMBERS = {"NaN": math.nan, "INF": math.inf}  # how SwanLab writes non-finite values


def read_swanlab(logdir: str | os.PathLike, experiment: str | None = None) -> TrackedRun:
    """The run in ``logdir`` (the ``logdir`` given to the sink; by default the mindwatch log
    dir's ``swanlog``): the only one, or the latest named ``experiment``."""
    runs = read_swanlab_runs(logdir)
    if experiment is not None:
        runs = [run for run in runs if run.name == experiment]
    assert runs, f"no SwanLab run{'' if experiment is None else ' ' + experiment} in {logdir}"
    assert experiment is not None or len(runs) == 1, \
        f"{len(runs)} SwanLab runs in {logdir}: name the experiment"
    return runs[-1]


def read_swanlab_runs(logdir: str | os.PathLike) -> list[TrackedRun]:
    """Every run in ``logdir``, oldest first."""
    found = [_read(p) for p in Path(logdir).glob("run-*") if (p / "backup.swanlab").exists()]
    return [run for _, run in sorted(found, key=lambda pair: pair[0])]


def _read(folder: Path) -> tuple[str, TrackedRun]:
    """(when it started, the run)."""
    from swanlab.log.backup.datastore import DataStore
    from swanlab.log.backup.models import ModelsParser

    store = DataStore()
    store.open_for_scan(str(folder / "backup.swanlab"))
    try:
        with ModelsParser() as parser:
            for record in store:
                parser.parse_record(record)
    finally:
        store.close()
    header, _, experiment, _, runtime, columns, scalars, medias, footer = parser.get_parsed()
    custom = {column.key for column in columns if column.cls == "CUSTOM"}
    metrics: dict[str, list[tuple[int, float]]] = {}
    for scalar in scalars:
        if scalar.key in custom:
            value = scalar.metric["data"]
            metrics.setdefault(scalar.key, []).append(
                (scalar.step, _NUMBERS.get(value, value) if isinstance(value, str) else value))
    texts: dict[str, list[tuple[int, str | None, str]]] = {}
    for media in medias:
        captions = [(more or {}).get("caption") for more in media.metric.get("more") or []]
        for index, text in enumerate(media.metric["data"]):
            caption = captions[index] if index < len(captions) else None
            texts.setdefault(media.key, []).append((media.step, caption, text))
    config = {}
    if runtime.config_filename:
        with open(folder / "files" / runtime.config_filename, encoding="utf-8") as handle:
            config = {key: entry["value"] for key, entry in (yaml.safe_load(handle) or {}).items()}
    status = RUNNING if footer is None else COMPLETED if footer.success else STOPPED
    return header.create_time, TrackedRun(
        name=experiment.name, status=status,
        verdict=config.get("mindwatch/verdict"), end_reason=config.get("mindwatch/end_reason"),
        metrics={name: sorted(points) for name, points in metrics.items()},
        config={key: value if isinstance(value, str) else json.dumps(value)
                for key, value in config.items()},
        events=[text for _, _, text in sorted(texts.get(ANOMALIES, []), key=lambda t: t[0])],
        files={caption: text.encode() for _, caption, text in texts.get(FILES, [])})


def swanlab_errors(logdir: str | os.PathLike) -> list[str]:
    """The errors SwanLab wrote for each run's end (a crashed run's reason), oldest run first."""
    from swanlab.log.backup.datastore import DataStore
    from swanlab.log.backup.models import BaseModel, Log

    found = []
    for folder in sorted(Path(logdir).glob("run-*")):
        store = DataStore()
        store.open_for_scan(str(folder / "backup.swanlab"))
        found += [record.message for record in map(BaseModel.from_record, store)
                  if isinstance(record, Log) and record.level == "ERROR"]
        store.close()
    return found
