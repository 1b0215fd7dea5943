"""What MindSpore's ``ModelCheckpoint`` callbacks beside the monitor saved, so that a report
whose own checkpoint holds a bad update can name the last good file (and warn that
``ModelCheckpoint.end()`` will save the bad weights once more when training stops)."""
from __future__ import annotations

import os
from typing import Any

from mindspore.train import ModelCheckpoint

from ...framework import SavedStates
from ..compat import checkpoint_destination, last_save_step
from ..reading.cb_params import field


class ModelCheckpointWatch:
    """Follows the ``ModelCheckpoint`` callbacks of one ``Model.train``/``fit`` call."""

    def __init__(self) -> None:
        self._callbacks: list[ModelCheckpoint] = []
        self._saves: dict[str, int] = {}         # path -> the step whose weights it holds

    def begin(self, cb_params: Any) -> None:
        self._callbacks = [callback for callback in field(cb_params, "list_callback") or ()
                           if isinstance(callback, ModelCheckpoint)]

    def step_end(self) -> None:
        """Note each callback's newest file. Called before the step is judged: a callback
        after the monitor in the list saved the step before; one ahead of it, this step."""
        for callback in self._callbacks:
            path = callback.latest_ckpt_file_name
            step = last_save_step(callback)
            if path and step is not None and path not in self._saves:
                self._saves[path] = step

    def states(self) -> SavedStates:
        on_disk = sorted((step, path) for path, step in self._saves.items()
                         if os.path.exists(path))
        saves_at_end = None
        if self._callbacks:
            prefix, directory = checkpoint_destination(self._callbacks[0])
            saves_at_end = f"ModelCheckpoint (prefix {prefix!r} in {directory})"
        return SavedStates(states=tuple(on_disk), saves_at_end=saves_at_end)
