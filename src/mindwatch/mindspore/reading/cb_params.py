"""Reading what MindSpore's callback parameters (``run_context.original_args()``) hold,
converted to plain Python values at this boundary."""
from __future__ import annotations

import contextlib
import sys
from types import FrameType
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn

from ...records import Run
from ..ranks.sdc import sdc_detection

# The notice of a run that asked for sink mode on the CPU.
SINK_MODE_DROPPED = ("dataset_sink_mode=True was asked for, but MindSpore trains on the CPU "
                     "without sink mode: every step runs on its own, with a callback after each")


def field(cb: Any, name: str, default: Any = None) -> Any:
    """``cb.<name>``, or ``default`` when it is not set: MindSpore's callback parameters raise
    KeyError, not AttributeError, for a name never set, so ``getattr`` with a default is not
    enough."""
    try:
        return getattr(cb, name, default)
    except KeyError:
        return default


def optimizer_of(cb: Any) -> nn.Optimizer | None:
    """Model's optimizer, else the one inside the user's own train cell (Model is then
    built without one: ``Model(nn.TrainOneStepCell(net_with_loss, optimizer))``)."""
    optimizer = field(cb, "optimizer")
    if optimizer is None:
        optimizer = getattr(field(cb, "train_network"), "optimizer", None)
    return optimizer if isinstance(optimizer, nn.Optimizer) else None


def batch_size_of(cb: Any) -> int | None:
    """Samples in this step: the leading dimension of the first input actually fed (right
    even for datasets whose rows are whole batches), else what the dataset says (sink mode
    feeds no element to the callback)."""
    element = field(cb, "train_dataset_element")
    if element:
        shape = getattr(element[0], "shape", None)
        if shape:
            return int(shape[0])
    dataset = field(cb, "train_dataset")
    try:
        return int(dataset.get_batch_size()) if dataset is not None else None
    except Exception:  # a dataset without batch information: throughput stays null
        return None


def setup_fields(cb: Any, *, wrapped: bool) -> dict[str, Any]:
    """The ``run`` record's fields of how MindSpore trains (records.Run)."""
    return {Run.WRAPPED: wrapped,
            Run.MODE: "GRAPH_MODE" if ms.get_context("mode") == ms.GRAPH_MODE
            else "PYNATIVE_MODE",
            Run.DEVICE_TARGET: ms.get_context("device_target"),
            Run.DATASET_SINK_MODE: bool(getattr(cb, "dataset_sink_mode", False)),
            Run.SDC_DETECTION: sdc_detection()}


def planned_steps(cb: Any, *, sink_dropped: bool) -> int | None:
    """Steps this training call will run: epochs x steps per epoch. When MindSpore dropped
    sink mode, ``batch_num`` is the sink size it does not use and each epoch trains the
    whole dataset (MindFormers, which multiplied its epochs for the sinks, too)."""
    epochs, per_epoch = field(cb, "epoch_num"), field(cb, "batch_num")
    if sink_dropped:
        dataset = field(cb, "train_dataset")
        with contextlib.suppress(Exception):   # a dataset that cannot tell: sink size stands
            per_epoch = int(dataset.get_dataset_size()) if dataset is not None else per_epoch
    return epochs * per_epoch if epochs and per_epoch else None


def epoch_position(cb: Any) -> tuple[int | None, int | None]:
    """``(epoch_step, steps_per_epoch)`` of the last step this callback covers: its place,
    1-based, in the epoch ``cur_epoch_num`` names, ``(cur_step_num - 1) % steps_per_epoch +
    1``, as MindSpore's LossMonitor prints it and MindFormers' MFLossMonitor (whose resumed
    count, ``initial_step`` on, ``MindWatchMonitor`` hands in as ``cur_step_num``).
    ``(None, None)`` when the epoch's length is unknown.

    Without sink mode an epoch is one pass over the dataset: ``batch_num``, or the dataset's
    size where MindSpore dropped sink mode (the CPU) and ``batch_num`` is the sink size it
    does not use. In sink mode an epoch is one sink of ``batch_num`` steps."""
    per_epoch, step = steps_per_epoch(cb), field(cb, "cur_step_num")
    if per_epoch is None or not _positive_int(step):
        return None, None
    return (step - 1) % per_epoch + 1, per_epoch


def steps_per_epoch(cb: Any) -> int | None:
    """One epoch's steps (``epoch_position`` says which), or None where unknown."""
    per_epoch = field(cb, "batch_num")
    if not field(cb, "dataset_sink_mode", False):
        dataset = field(cb, "train_dataset")
        with contextlib.suppress(Exception):   # a dataset that cannot tell: batch_num stands
            per_epoch = int(dataset.get_dataset_size()) if dataset is not None else per_epoch
    return per_epoch if _positive_int(per_epoch) else None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def evaluation_of(cb: Any) -> dict[str, float | None] | None:
    """``Model.fit``'s evaluation results (metrics and ``eval_loss``) as floats; None for a
    metric that is not one number (a confusion matrix)."""
    results = field(cb, "eval_results")
    if not isinstance(results, dict):
        return None
    return {str(name): _number(value) for name, value in results.items()}


def sink_mode_dropped(cb: Any) -> bool:
    """Whether ``Model.train``/``fit`` was called with ``dataset_sink_mode=True`` that
    MindSpore dropped without a word (it does on the CPU). The request is not in the
    callback's parameters, only in ``Model._train``'s frame: read it there, best effort."""
    if field(cb, "dataset_sink_mode", False) or ms.get_context("device_target") != "CPU":
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_train" and isinstance(frame.f_locals.get("self"),
                                                           ms.train.Model):
            return bool(frame.f_locals.get("dataset_sink_mode"))
        frame = frame.f_back
    return False


def _number(value: Any) -> float | None:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return float(array.reshape(-1)[0]) if array.size == 1 else None
