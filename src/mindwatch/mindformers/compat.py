"""What may differ between the MindSpore Transformers releases mindwatch serves, in one place.

Tested: MindFormers 1.6.0 (MindSpore 2.7.0), 1.7.0 (2.7.1), 1.8.0 (2.7.2), 1.9.0 (2.9.0) and
2.0.0 (2.10.0), each pair with its own lock (``make test-compat``; docs/versions.md). Read
from their sources, these are the same in all five, and mindwatch reads each through here:

- ``MFTrainOneStepCell`` and ``MFPipelineWithLossScaleCell`` call the overflow hooks
  mindwatch's cells extend (``train_one_step_cell``, ``pipeline_cell``) and return
  ``(loss, overflow, scaling_sens, learning_rate, global_norm)``, and with
  ``local_norm: True`` also ``(local_norm, size)``; ``global_norm`` is None without
  ``use_clip_grad``.
- ``MindFormerRegister`` with ``MindFormerModuleType.CALLBACK`` and ``WRAPPER``;
  ``tools.utils.get_output_root_path``; ``utils.tensorboard.get_tensorboard_writer``.
- The cell keeps ``use_clip_grad``, ``use_skip_data_by_global_norm`` (a top-level YAML key)
  and ``global_norm_spike_threshold`` (``monitor_config.global_norm_spike_threshold``).
- ``CheckpointMonitor`` leaves out of its checkpoints every Parameter whose name holds an
  entry of its instance's ``filter_list`` (``leave_out_of_checkpoints``).
- The Trainer builds ``runner_wrapper`` before ``callbacks:`` (register/mindwatch_entries.py
  says what that means for ``auto_register``).
- Its ``Context`` singleton (``core.context.build_context``) keeps the YAML's
  ``parallel_config`` as ``parallel_opr.parallel`` (``model_parallel``, ``pipeline_stage``,
  ``expert_parallel``; absent ones are 1): ``model_sharded``.

What does differ: the Trainer hands the wrapper ``print_separate_loss`` from 1.7 on and
``lr_scheduler`` / ``grouped_lr_scheduler`` from 1.8 on (a wrapper takes them through
``**kwargs``); from 1.9 on it prefers
``monitor_config.health_checkpoint.global_norm_spike_threshold`` (the old key still works);
2.0 imports ``hyper_parallel``, which no registry serves. The Trainer replaces the wrapper
type by its pipeline cell under pipeline stages and gradient accumulation in all five
(``keep_wrapper_type``).

Every accessor falls back to "unknown" rather than raising, so a release outside the table
trains on with what works; the run log says once that it is untested.
"""
from __future__ import annotations

import functools
import os
from typing import Any

from ..basics.versions import Release, ReleaseTable, release_series
from ..records import Versions

TESTED = ReleaseTable("MindSpore Transformers", ("1.6", "1.7", "1.8", "1.9", "2.0"),
                        detail="1.6, 1.7 and 1.8 with MindSpore 2.7, 1.9 with MindSpore 2.9, "
                               "2.0 with MindSpore 2.10")
# The MindSpore series each MindFormers series is tested beside (what its wheel requires).
PAIRED_MINDSPORE = {"1.6": "2.7", "1.7": "2.7", "1.8": "2.7", "1.9": "2.9", "2.0": "2.10"}
INSTALL_HINT = ("pip install 'mindformers>=1.6,<2.1' with its MindSpore (docs/versions.md: "
                "1.6-1.8 with 2.7, 1.9 with 2.9, 2.0 with 2.10)")

# The train cells' output tuple: its lengths, and where the optional per-parameter norms sit
OUTPUT_LENGTHS = (5, 7)
LOCAL_NORM_INDEX = 5
# The cell's attributes mindwatch reads, with MindFormers' defaults
USE_CLIP_GRAD = "use_clip_grad"
SKIP_BY_GLOBAL_NORM = "use_skip_data_by_global_norm"
SPIKE_THRESHOLD, DEFAULT_SPIKE_THRESHOLD = "global_norm_spike_threshold", 1.0


def pair_untested(mindformers: str | None, mindspore: str | None) -> str | None:
    """The line to say once for an untested MindFormers, or one beside a MindSpore it is
    not tested with; None for a tested pair."""
    message = TESTED.untested(mindformers)
    if message is not None:
        return message
    paired = PAIRED_MINDSPORE[release_series(mindformers) or ""]
    if release_series(mindspore) == paired:
        return None
    return (f"MindSpore Transformers {mindformers} is tested beside MindSpore {paired}, not "
            f"{mindspore}; tested pairs: {TESTED.detail}. Training goes on; a part that does "
            f"not work with this pair says so (docs/versions.md)")


def release() -> Release:
    """This process's MindFormers, for the run record, and whether its pair is tested."""
    import mindformers
    import mindspore
    version = getattr(mindformers, "__version__", None)
    return Release(Versions.MINDFORMERS, version,
                   pair_untested(version, getattr(mindspore, "__version__", None)))


def register_callback(cls: type) -> type:
    """Registers ``cls`` with MindFormers as a callback type (YAML ``callbacks: - type:``)."""
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
    return MindFormerRegister.register(MindFormerModuleType.CALLBACK)(cls)


def train_one_step_cell() -> type:
    """MindFormers' ``MFTrainOneStepCell``, which ``MindWatchTrainOneStepCell`` extends. In
    every tested release its construct calls, in this order, ``start_overflow_check(loss,
    scaling_sens)``, ``get_overflow_status(status, grads)`` on the unscaled gradients after
    the data-parallel reduction and before clipping, ``process_loss_scale(cond)`` (whose
    result gates ``self.optimizer(grads)``), then ``clip_grad_norm(grads)``; ``status`` and
    ``cond`` go nowhere else (train_cell.py relies on it)."""
    from mindformers.wrapper import MFTrainOneStepCell
    return MFTrainOneStepCell


def pipeline_cell() -> type:
    """MindFormers' ``MFPipelineWithLossScaleCell``, which ``MindWatchPipelineCell`` extends.
    In every tested release its construct runs the micro-batches, takes the accumulated
    gradients, clips them with ``clip_grad_norm(grads)`` when ``use_clip_grad``, then calls
    ``get_overflow_status(self.status, grads)`` and ``process_loss_scale(cond)``, whose result
    gates ``self.optimizer(grads)``; its loss is ``self.network(*inputs)`` (pipeline_cell.py
    relies on it)."""
    from mindformers.wrapper import MFPipelineWithLossScaleCell
    return MFPipelineWithLossScaleCell


# The Trainer's methods that replace runner_wrapper.type by its pipeline cell (pipeline
# stages; gradient accumulation under semi-automatic parallelism), in every tested release
WRAPPER_RESETS = ("_reset_wrapper_for_pipeline_parallel", "_reset_wrapper_for_grad_accu")
MINDWATCH_WRAPPERS = ("MindWatchTrainOneStepCell", "MindWatchPipelineCell")
PIPELINE_WRAPPER = "MindWatchPipelineCell"


def keep_wrapper_type() -> None:
    """Where MindFormers' Trainer puts its own pipeline cell in place of the YAML's
    ``runner_wrapper.type``, it puts ``MindWatchPipelineCell`` in place of either of
    mindwatch's cells (its other keys, ``micro_batch_num`` among them, as MindFormers sets
    them); any other type as before. Without this a user's protection would be gone, the
    moment ``pipeline_stage`` or ``gradient_accumulation_steps`` passes 1. Once per process."""
    try:
        from mindformers.trainer.base_trainer import BaseTrainer
    except ImportError:
        return
    for name in WRAPPER_RESETS:
        original = getattr(BaseTrainer, name, None)
        if original is None or getattr(original, "mindwatch_keeps_type", False):
            continue

        def reset(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            wrapper = getattr(self.config, "runner_wrapper", None)
            chosen = getattr(wrapper, "type", None) if wrapper is not None else None
            result = _original(self, *args, **kwargs)
            if chosen in MINDWATCH_WRAPPERS:
                self.config.runner_wrapper.type = PIPELINE_WRAPPER
            return result

        functools.update_wrapper(reset, original)
        reset.mindwatch_keeps_type = True       # type: ignore[attr-defined]
        setattr(BaseTrainer, name, reset)


def leave_out_of_checkpoints(marker: str) -> None:
    """MindFormers' ``CheckpointMonitor`` saves no Parameter whose name holds ``marker``
    (mindwatch's own: its cells' limits and step stats), as it saves none holding an entry of
    its ``filter_list`` ("accu_grads", "_cache", ...; the same list, instance attribute and
    rule in every tested release). A checkpoint of MindFormers' then holds what it holds
    without mindwatch's cell, and loads, strictly or through MindFormers' resume, into a model
    without it; mindwatch's own checkpoints leave them out alike (``save_atomically``). The
    values are the monitor's per-step scratch, set again before every step: nothing to
    restore. Once per process; a release without the list is left as it is."""
    try:
        from mindformers.core.callback.callback import CheckpointMonitor
    except ImportError:
        return
    original = CheckpointMonitor.__init__
    if getattr(original, "mindwatch_leaves_out", False):
        return

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        filters = getattr(self, "filter_list", None)
        if isinstance(filters, list) and marker not in filters:
            filters.append(marker)

    functools.update_wrapper(init, original)
    init.mindwatch_leaves_out = True        # type: ignore[attr-defined]
    CheckpointMonitor.__init__ = init


def register_wrapper(cls: type) -> type:
    """Registers ``cls`` with MindFormers as a wrapper type (YAML ``runner_wrapper: type:``)."""
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
    return MindFormerRegister.register(MindFormerModuleType.WRAPPER)(cls)


def output_root() -> str:
    """MindFormers' output directory (``output_dir``), or ``./output`` where it has none."""
    try:
        from mindformers.tools.utils import get_output_root_path
        return str(get_output_root_path())
    except Exception:
        return os.path.join(os.getcwd(), "output")


def tensorboard_logdir() -> str | None:
    """Where MindFormers' own TensorBoard writer of this rank writes, or None without one."""
    try:
        from mindformers.utils.tensorboard import get_tensorboard_writer
        writer = get_tensorboard_writer()
    except Exception:
        return None
    logdir = getattr(writer, "logdir", None)
    return logdir if isinstance(logdir, str) and logdir else None


def outputs_of_train_cell(outputs: Any) -> bool:
    """Whether ``outputs`` has the shape of a MindFormers train cell's."""
    return isinstance(outputs, (tuple, list)) and len(outputs) in OUTPUT_LENGTHS


def local_norms(outputs: Any) -> Any:
    """The per-parameter squared norms output (``local_norm: True``), or None."""
    if len(outputs) > LOCAL_NORM_INDEX:
        return outputs[LOCAL_NORM_INDEX]
    return None


def cell_setting(cell: Any, name: str, default: Any) -> Any:
    """One of the train cell's settings above, MindFormers' default where it has none."""
    return getattr(cell, name, default) if cell is not None else default


# parallel_config's degrees that split the model across ranks (data_parallel replicates it)
SHARDING_DEGREES = ("model_parallel", "pipeline_stage", "expert_parallel")


def model_sharded() -> bool | None:
    """Whether the YAML's ``parallel_config`` splits the model across ranks (a degree of
    ``SHARDING_DEGREES`` above 1); None where no Trainer built MindFormers' context, or a
    release keeps it elsewhere."""
    try:
        from mindformers.core.context.build_context import Context
        parallel = Context._instance.parallel_opr.parallel
        degrees = [int(getattr(parallel, name, 1) or 1) for name in SHARDING_DEGREES]
    except Exception:           # an accessor: "unknown" rather than a failure
        return None
    return any(degree > 1 for degree in degrees)
