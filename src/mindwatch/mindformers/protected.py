"""``ProtectedCell``: what mindwatch's two MindFormers train cells share, the one-step cell
(train_cell.py) and the pipeline one (pipeline_cell.py).

MindFormers' cells call their overflow hooks on themselves (``get_overflow_status``,
``process_loss_scale``), so the decision must sit in the cell's own class: each of mindwatch's
cells is MindFormers' class with these methods beside it, in its method order. Each cell
keeps its own hooks (where its loss and its pre-clip norm come from differ), and calls
``mindwatch_decide`` from there: the LR read, the stats vector, ``StepVerdict`` (verdict.py),
and the stats written to a Parameter the callback reads after the step. What is left is the
host's side, as ``MonitoredTrainStep`` has it (the callback reads both alike): the monitor's
adoption, state steps, ``replay``, the step's outputs.

No ``super()`` in the graph's methods here (each cell keeps its own ``process_loss_scale``):
this class is no Cell, and MindSpore's parser resolves a ``super()`` in a graph from the
Cell's own class. The host's methods (``__call__``, ``replay``) are plain Python, where
``super()`` is MindFormers' cell, next in the method order.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import ops

from ..mindspore.compat import parallel_context
from ..mindspore.probes.host_state import copies_before, host_state
from ..mindspore.ranks.distributed import current_rank
from ..mindspore.reading.outputs import StepOutputs
from ..mindspore.step.lr import group_indices
from ..mindspore.step.verdict import OWN_PREFIX, StepVerdict, current_lr, stats_vector
from . import compat


def without_monitor(cell: str) -> str:
    return (f"{cell} runs without MindWatchMonitor: it withholds updates with a non-finite "
            "loss or gradients only; gradient explosions, LR blow-ups and spikes are applied, "
            "and nothing is logged. Add `- type: MindWatchMonitor` to the YAML's callbacks: "
            "(docs/mindformers.md)")


class ProtectedCell:
    """The shared part of ``MindWatchTrainOneStepCell`` and ``MindWatchPipelineCell``; each
    calls ``_mindwatch_init`` after MindFormers' ``__init__``."""

    # MindFormers' cell's, beside this class in the cell's own (annotations only, for mypy)
    network: Any
    optimizer: Any
    weights: Any
    get_parameters: Any
    # set with object.__setattr__: host state, no Parameters nor sub-Cells
    last_inputs: Any
    _adopted: bool
    _said_alone: bool

    def _mindwatch_init(self, optimizer, *, world: int, rank_norms: bool,
                        loss_sums: int = 1) -> None:
        """``world``: the ranks that share the verdict (0: this rank decides alone);
        ``rank_norms``: each rank's own gradient norm travels with it (``origin_rank``);
        ``loss_sums``: the micro-batches whose losses the network's output sums."""
        # The loss as MFLossMonitor prints it: the network's output over the micro-batches
        # it sums (MindSpore's MicroBatchInterleaved copies, and the pipeline cell's micro
        # batches), so that the spike limits and the records are the user's numbers.
        self.mindwatch_loss_scale = 1.0 / (loss_sums * interleaved(self.network))
        self.mindwatch_group_lr = bool(getattr(optimizer, "is_group_lr", False))
        self.mindwatch_lr_groups = tuple(group_indices(optimizer))
        lr_count = len(self.mindwatch_lr_groups) if self.mindwatch_group_lr else 1
        # no monitor yet: non-finite values only, until MindWatchMonitor adopts the cell
        self.mindwatch_verdict = StepVerdict(grad_explode=math.inf, lr_count=lr_count,
                                             world=world, rank=current_rank().rank,
                                             rank_norms=rank_norms)
        size = 2 + lr_count + self.mindwatch_verdict.shared_size
        self.mindwatch_stats = ms.Parameter(ms.Tensor(np.zeros(size, np.float32)),
                                            name=OWN_PREFIX + "step_stats", requires_grad=False)
        weights = {id(p) for p in self.weights}
        # Loaded in the condition: read only inside MindFormers' branch, a state restored
        # between steps (rewind) would be missed by the graph (wrap.py says more).
        self.mindwatch_optimizer_state = ms.ParameterTuple(
            p for p in optimizer.get_parameters() if id(p) not in weights)
        self.mindwatch_cpu_check = ms.get_context("device_target") == "CPU"
        # the host's side, as MonitoredTrainStep's (the callback reads them alike)
        self.skip_anomalous, self.per_layer_norms, self.has_aux = True, False, False
        self.state_due = False
        for name, value in (("last_state", None), ("state_layout", None), ("probes", None),
                            ("last_inputs", None), ("_adopted", False),
                            ("_said_alone", False)):
            object.__setattr__(self, name, value)

    # -- in the graph ------------------------------------------------------------------
    def mindwatch_cpu_overflow(self, global_norm):
        """The overflow check on the CPU, which has no float-status kernel: a non-finite
        norm (MindFormers' own check elsewhere)."""
        return ops.logical_not(ops.isfinite(ops.reshape(global_norm, ())))

    def mindwatch_decide(self, cond, loss, global_norm, local_sq):
        """``cond``: the overflow; returns ``(cond, apply)`` for ``process_loss_scale``."""
        lr = current_lr(self.optimizer, self.mindwatch_group_lr, self.mindwatch_lr_groups)
        stats = stats_vector(loss * self.mindwatch_loss_scale, global_norm, lr,
                             self.mindwatch_group_lr)
        cond = ops.depend(cond, self.mindwatch_optimizer_state)
        apply, stats = self.mindwatch_verdict(stats, local_sq)
        cond = ops.depend(cond, ops.assign(self.mindwatch_stats, stats))
        return cond, apply

    # -- the host's side ---------------------------------------------------------------
    def adopt(self, grad_explode: float) -> None:
        """``MindWatchMonitor`` drives this cell: its ``grad_explode`` bounds the norm."""
        object.__setattr__(self, "_adopted", True)
        self.mindwatch_verdict.set_grad_explode(grad_explode)

    def __call__(self, *inputs):
        """MindFormers' cell's ``__call__`` (next in the cell's method order) on ``inputs``,
        with a state step's host copies around it when one is due."""
        call = super().__call__        # type: ignore[misc]
        object.__setattr__(self, "last_inputs", inputs)     # references, for replay
        if not self._adopted and not self._said_alone:
            object.__setattr__(self, "_said_alone", True)
            warnings.warn(without_monitor(type(self).__name__), stacklevel=2)
        if not self.state_due:
            return call(*inputs)
        self.state_due = False                  # one state step per request
        before = copies_before(self.optimizer)
        outputs = call(*inputs)
        norms = compat.local_norms(outputs)
        layout, vector = host_state(self.optimizer, None if norms is None else
                                    norms.asnumpy().reshape(-1), before=before)
        object.__setattr__(self, "state_layout", layout)
        object.__setattr__(self, "last_state", vector)
        return outputs

    def stats_of(self, outputs) -> list[float]:
        return self.mindwatch_stats.asnumpy().tolist()

    def read(self, outputs) -> StepOutputs:
        from .reader import read_protected
        return read_protected(outputs, self, self.stats_of(outputs))

    @property
    def verdict(self) -> StepVerdict:
        return self.mindwatch_verdict

    def update_applied(self, stats: list[float]) -> bool:
        return self.mindwatch_verdict.update_applied(stats)

    def within_bounds(self, stats: list[float]) -> bool:
        return self.mindwatch_verdict.within_bounds(stats)

    def set_limits(self, **limits: float) -> None:
        self.mindwatch_verdict.set_limits(**limits)

    def recording(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def replay(self, run=None) -> Any:
        """The last step once more on its inputs (MindFormers' ``__call__``), its update
        withheld whatever it finds; the loss scale's Parameters are put back afterwards (a
        replay is no step of the loss scale's). None before a first step."""
        call = super().__call__        # type: ignore[misc]
        if self.last_inputs is None:
            return None
        kept = [(p, p.asnumpy().copy()) for p in self._loss_scale_state()]
        try:
            with self.mindwatch_verdict.withholding():
                return call(*self.last_inputs)
        finally:
            for parameter, array in kept:
                parameter.set_data(ms.Tensor(array))

    def _loss_scale_state(self) -> list[ms.Parameter]:
        """The cell's Parameters that are neither the model's nor the optimizer's nor
        mindwatch's: the loss scale and its manager's counters."""
        known = {id(p) for p in self.network.get_parameters()}
        known |= {id(p) for p in self.optimizer.get_parameters()}
        return [p for p in self.get_parameters()
                if id(p) not in known and not p.name.startswith(OWN_PREFIX)]


def interleaved(network: Any) -> int:
    """The copies MindSpore's ``MicroBatchInterleaved`` (``micro_batch_interleave_num``)
    sums the loss of, found down the chain of wrapper cells; 1 without it."""
    copies, seen = 1, 0
    while network is not None and seen < 16:
        count = getattr(network, "interleave_num", None)
        if isinstance(count, int) and count > 1:
            copies *= count
        network, seen = getattr(network, "network", None), seen + 1
    return copies


def data_parallel_world() -> tuple[bool, int]:
    """Whether the gradients are reduced by the cell's data-parallel reducer, and the ranks
    that then share the verdict (0 without data parallelism)."""
    parallel = parallel_context()
    return parallel.data_parallel, (parallel.device_num if parallel.data_parallel else 0)
