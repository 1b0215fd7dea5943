"""What may differ between the MindSpore releases mindwatch serves, in one place.

Tested: 2.7.0, 2.7.1, 2.7.2, 2.8.0, 2.9.0 and 2.10.0 (``make test-compat``; docs/versions.md).
The public APIs mindwatch uses (``Callback``'s hooks, ``cb_params``, ``Model.train``/``fit``,
``LearningRateSchedule.construct(global_step)``, ``TrainOneStepCell``'s outputs) are the same
in all of them. What lives here is what MindSpore does not promise to keep: private helpers
and attributes, a generated protobuf module, the names optimizers give their state, and the
runtime's memory statistics. Each is read through one function or table, which falls back to
"unknown" rather than raising, so that a release outside the table trains on with what works
(the run log says once that it is untested).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..basics.versions import Release, ReleaseTable
from ..records import FrameworkMemory, Versions

TESTED = ReleaseTable("MindSpore", ("2.7", "2.8", "2.9", "2.10"))

# Name prefixes MindSpore's and MindFormers' optimizers give their moment Parameters
# (``<prefix>.<weight name>``), the same in every tested release: Adam, AdamWeightDecay,
# Lamb, LazyAdam, Adamax, Momentum's velocity, MindFormers' AdamW. An optimizer without
# either keeps no such moment, and state records leave ``m_norm`` / ``v_norm`` out.
FIRST_MOMENT_PREFIXES = ("moment1", "adam_m", "lamb_m", "exp_avg", "moments")
SECOND_MOMENT_PREFIXES = ("moment2", "adam_v", "lamb_v", "exp_avg_sq")

# mindwatch's key -> (the key of ``mindspore.runtime.memory_stats()``, the single-value
# function of ``mindspore.runtime`` that returns the same figure, in bytes)
RUNTIME_MEMORY = {
    FrameworkMemory.ALLOCATED_MB: ("total_allocated_memory", "memory_allocated"),
    FrameworkMemory.RESERVED_MB: ("total_reserved_memory", "memory_reserved"),
    FrameworkMemory.MAX_ALLOCATED_MB: ("max_allocated_memory", "max_memory_allocated"),
    FrameworkMemory.MAX_RESERVED_MB: ("max_reserved_memory", "max_memory_reserved"),
}


def release() -> Release:
    """This process's MindSpore, for the run record, and whether it is tested."""
    import mindspore
    return TESTED.release(Versions.MINDSPORE, getattr(mindspore, "__version__", None))


@dataclass(frozen=True)
class ParallelContext:
    """How gradients are reduced, as ``nn.TrainOneStepCell`` reads it."""

    data_parallel: bool       # DATA_PARALLEL or HYBRID_PARALLEL: the step reduces gradients
    gradients_mean: bool
    device_num: int


def parallel_context() -> ParallelContext:
    """MindSpore's own parallel settings, read through the private helpers its
    ``TrainOneStepCell`` uses (``mindspore.parallel._utils``); where those are missing, the
    public auto-parallel context."""
    from mindspore.context import ParallelMode
    try:
        from mindspore.parallel._utils import (
            _get_device_num,
            _get_gradients_mean,
            _get_parallel_mode,
        )
        mode, mean, devices = _get_parallel_mode(), _get_gradients_mean(), _get_device_num()
    except ImportError:
        import mindspore as ms
        mode = ms.get_auto_parallel_context("parallel_mode")
        mean = ms.get_auto_parallel_context("gradients_mean")
        devices = ms.get_auto_parallel_context("device_num")
    return ParallelContext(
        data_parallel=mode in (ParallelMode.DATA_PARALLEL, ParallelMode.HYBRID_PARALLEL),
        gradients_mean=bool(mean), device_num=int(devices))


def last_save_step(checkpoint_callback: Any) -> int | None:
    """The step a ``ModelCheckpoint``'s latest file was saved at (its private
    ``_last_triggered_step``); None where a release keeps no such record."""
    step = getattr(checkpoint_callback, "_last_triggered_step", None)
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def checkpoint_destination(checkpoint_callback: Any) -> tuple[str, str]:
    """A ``ModelCheckpoint``'s file prefix and directory (private attributes), for a report;
    "?" for what a release does not keep."""
    return (str(getattr(checkpoint_callback, "_prefix", "?")),
            str(getattr(checkpoint_callback, "_directory", "?")))


def summary_event_class() -> Any:
    """MindSpore's summary ``Event`` protobuf class (``mindspore.train.summary_pb2``)."""
    try:
        from mindspore.train.summary_pb2 import Event
    except ImportError as exc:
        raise ImportError(
            "the MindInsight sink (mindinsight=True) writes MindSpore's summary format and needs "
            "MindSpore's protobuf classes: pip install mindspore   (MindInsight itself is not "
            "needed to write, only to view)") from exc
    return Event


def schedule_table(schedule: Any) -> Any:
    """The LR Parameter a schedule Cell holds as its table (a fixed LR wrapped for group
    LRs, or a per-step LR list: ``learning_rate``), or None for a computed schedule."""
    return getattr(schedule, "learning_rate", None)
