"""What MindSpore's ``ModelCheckpoint`` callbacks beside the monitor saved (MindFormers'
``CheckpointMonitor`` is one), so that a report can name the newest file from before the
damage in the weights began (decisions/last_good.py), and warn that ``ModelCheckpoint.end()``
saves the weights once more when training stops.

The files this process saw saved are known by the step they were saved at. Those of earlier
processes (a run resumed from one of them) are found in the callbacks' folders: MindSpore
names a later process's files ``<prefix>_1-...``, ``<prefix>_2-...`` beside the first's. A
file's step is the ``step_num`` it holds where it has one (MindFormers appends it: the global
step, which its names, counted from 1 again in a resumed run, are not), else its name's
``<epoch>_<step in epoch>``. A file from an earlier process at a step after the one this
process resumed from belongs to another line of training (the one that went on from there
before), and is left out.
"""
from __future__ import annotations

import os
import re
from typing import Any

from mindspore.train import ModelCheckpoint

from ...framework import SavedStates
from ..compat import checkpoint_destination, last_save_step
from ..reading.cb_params import field
from .ckpt_scalars import read_scalars

STEP_NUM = "step_num"


class ModelCheckpointWatch:
    """Follows the ``ModelCheckpoint`` callbacks of one ``Model.train``/``fit`` call."""

    def __init__(self) -> None:
        self._callbacks: list[ModelCheckpoint] = []
        self._saves: dict[str, int] = {}         # path -> the step whose weights it holds
        self._began_after = 0                    # the step training (re)started after
        self._per_epoch: int | None = None       # MindSpore's batch_num, as its names count

    def begin(self, cb_params: Any) -> None:
        self._callbacks = [callback for callback in field(cb_params, "list_callback") or ()
                           if isinstance(callback, ModelCheckpoint)]
        began = field(cb_params, "cur_step_num")
        self._began_after = began if isinstance(began, int) and began > 0 else 0
        per_epoch = field(cb_params, "batch_num")
        self._per_epoch = per_epoch if isinstance(per_epoch, int) and per_epoch > 0 else None

    def step_end(self) -> None:
        """Note each callback's newest file. Called before the step is judged: a callback
        after the monitor in the list saved the step before; one ahead of it, this step."""
        for callback in self._callbacks:
            path = callback.latest_ckpt_file_name
            step = last_save_step(callback)
            if path and step is not None and path not in self._saves:
                self._saves[path] = step

    def states(self) -> SavedStates:
        found: dict[str, int] = {}
        for callback in self._callbacks:
            prefix, directory = checkpoint_destination(callback)
            for path, named_step in _files(directory, prefix, self._per_epoch):
                step = _held_step(path, self._saves.get(path, named_step))
                if step is not None and (path in self._saves or step <= self._began_after):
                    found[path] = step
        found.update((path, _held_step(path, step) or step) for path, step in self._saves.items()
                     if path not in found)
        on_disk = sorted((step, path) for path, step in found.items() if os.path.exists(path))
        saves_at_end = None
        if self._callbacks:
            first = self._callbacks[0]
            prefix, directory = checkpoint_destination(first)
            saves_at_end = f"{type(first).__name__} (prefix {prefix!r} in {directory})"
        return SavedStates(states=tuple(on_disk), saves_at_end=saves_at_end)


def _files(directory: str, prefix: str, per_epoch: int | None) -> list[tuple[str, int | None]]:
    """``(path, step from its name)`` of each checkpoint file of ``prefix`` (or of the same
    prefix without a later process's ``_<n>``) in ``directory``."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    bases = {prefix, re.sub(r"_\d+$", "", prefix)}
    pattern = re.compile(rf"(?:{'|'.join(map(re.escape, bases))})(?:_\d+)?-(\d+)_(\d+)\.ckpt")
    found = []
    for name in names:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        epoch, in_epoch = int(match[1]), int(match[2])
        step = (epoch - 1) * per_epoch + in_epoch if per_epoch and epoch > 0 else None
        found.append((os.path.join(directory, name), step))
    return found


def _held_step(path: str, otherwise: int | None) -> int | None:
    """The global step the file's state is of: its ``step_num`` where it holds one."""
    held = read_scalars(path, (STEP_NUM,)).get(STEP_NUM)
    return int(held) if held is not None else otherwise
