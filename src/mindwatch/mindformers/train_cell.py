"""``MindWatchTrainOneStepCell``: MindFormers' ``MFTrainOneStepCell`` with mindwatch's decision
in its graph, so that under the Trainer the bad update is withheld as ``wrap`` withholds it.

A YAML turns it on with one line, beside ``MindWatchMonitor`` in ``callbacks:``::

    runner_wrapper:
      type: MindWatchTrainOneStepCell   # every MFTrainOneStepCell argument, as before

It extends MindFormers' cell through the hooks its construct already calls (compat.py's
``train_one_step_cell``), not a copy of its construct, whose body differs between releases:

- ``start_overflow_check(loss, ...)`` passes the loss on inside ``status``;
- ``get_overflow_status(status, grads)`` gets the unscaled gradients after the data-parallel
  reduction and before clipping. There mindwatch measures the pre-clip global norm with
  MindFormers' own ``ClipGradNorm`` (the same number, and the same model-parallel reductions,
  as the ``global_norm`` it returns), reads the step's LR, and lets ``StepVerdict`` decide
  (verdict.py). The overflow check stays MindFormers' on Ascend and GPU; on the CPU, which has
  no float-status kernel, an overflow is a non-finite norm (IsFinite).
- ``process_loss_scale(cond)`` updates the loss scale from the overflow alone (a withheld
  update is not an overflow: a dynamic loss scale stays as it was), and returns "overflow or
  withheld", which gates MindFormers' own ``if not overflow: self.optimizer(grads)``. No
  second branch: the graph's ``if`` is MindFormers'.

The outputs keep MindFormers' layout, so its callbacks read them as before; on a withheld
step ``overflow`` is True (the update was dropped, as on an overflow). mindwatch's own numbers
(the stats vector) go to a Parameter the callback reads after the step: one small
device-to-host copy.

Without ``MindWatchMonitor`` the cell withholds non-finite updates only, and says so once.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from ..mindspore.compat import parallel_context
from ..mindspore.distributed import current_rank
from ..mindspore.graph_sums import after, square_sum
from ..mindspore.host_state import copies_before, host_state
from ..mindspore.lr import group_indices
from ..mindspore.outputs import StepOutputs
from ..mindspore.verdict import OWN_PREFIX, StepVerdict, current_lr, stats_vector
from . import compat

WITHOUT_MONITOR = (
    "MindWatchTrainOneStepCell runs without MindWatchMonitor: it withholds updates with a "
    "non-finite loss or gradients only; gradient explosions, LR blow-ups and spikes are "
    "applied, and nothing is logged. Add `- type: MindWatchMonitor` to the YAML's "
    "callbacks: (docs/mindformers.md)")


class LocalSquareSum(nn.Cell):
    """The data-parallel gradient reducer, after this rank's squared norm of its own
    gradients is kept in ``local_sq`` (the verdict shares it: ``origin_rank``)."""

    def __init__(self, reducer: nn.Cell):
        super().__init__(auto_prefix=False)
        self.reducer = reducer
        self.hyper_map = ops.HyperMap()
        self.local_sq = ms.Parameter(ms.Tensor(0.0, ms.float32), name=OWN_PREFIX + "local_sq",
                                     requires_grad=False)

    def construct(self, grads):
        local_sq = ops.stack(self.hyper_map(square_sum, grads)).sum()
        local_sq = ops.depend(local_sq, ops.assign(self.local_sq, local_sq))
        # measured before the reduction runs, whose AllReduce may reuse the gradients' memory
        return self.reducer(self.hyper_map(ops.partial(after, local_sq), grads))


@compat.register_wrapper
class MindWatchTrainOneStepCell(compat.train_one_step_cell()):  # type: ignore[misc]
    """MindFormers' ``MFTrainOneStepCell`` (same arguments, same outputs) whose update is
    withheld, in the graph, for a non-finite loss or gradients, a norm above
    ``grad_explode``, an LR above its limit and, under ``on_anomaly: skip``, a spike; the
    limits come from ``MindWatchMonitor`` before each step."""

    def __init__(self, network, optimizer, *args, **kwargs):
        super().__init__(network, optimizer, *args, **kwargs)
        parallel = parallel_context()
        self.mindwatch_share = parallel.data_parallel
        world = parallel.device_num if self.mindwatch_share else 0
        self.mindwatch_group_lr = bool(getattr(optimizer, "is_group_lr", False))
        self.mindwatch_lr_groups = tuple(group_indices(optimizer))
        lr_count = len(self.mindwatch_lr_groups) if self.mindwatch_group_lr else 1
        # no monitor yet: non-finite values only, until MindWatchMonitor adopts the cell
        self.mindwatch_verdict = StepVerdict(grad_explode=math.inf, lr_count=lr_count,
                                             world=world, rank=current_rank().rank)
        size = 2 + lr_count + (world + 1 if world else 0)
        self.mindwatch_stats = ms.Parameter(ms.Tensor(np.zeros(size, np.float32)),
                                            name=OWN_PREFIX + "step_stats", requires_grad=False)
        if self.mindwatch_share:
            self.grad_reducer = LocalSquareSum(self.grad_reducer)  # type: ignore[has-type]
        weights = {id(p) for p in self.weights}
        # Loaded in the condition: read only inside MindFormers' branch, a state restored
        # between steps (rewind) would be missed by the graph (wrap.py says more).
        self.mindwatch_optimizer_state = ms.ParameterTuple(
            p for p in optimizer.get_parameters() if id(p) not in weights)
        self.mindwatch_cpu_check = ms.get_context("device_target") == "CPU"
        # the host's side, as MonitoredTrainStep's (the callback reads them alike)
        self.skip_anomalous, self.per_layer_norms, self.has_aux = True, False, False
        self.state_due = False
        object.__setattr__(self, "last_state", None)
        object.__setattr__(self, "state_layout", None)
        object.__setattr__(self, "probes", None)
        object.__setattr__(self, "last_inputs", None)
        object.__setattr__(self, "_adopted", False)
        object.__setattr__(self, "_said_alone", False)

    # -- in the graph: MindFormers' hooks ------------------------------------------------
    def start_overflow_check(self, pre_cond, compute_input):
        status, compute_input = super().start_overflow_check(pre_cond, compute_input)
        return (status, pre_cond), compute_input

    def get_overflow_status(self, status, compute_output):
        status, loss = status
        global_norm = self.clip_grad_norm(compute_output)[1]
        lr = current_lr(self.optimizer, self.mindwatch_group_lr, self.mindwatch_lr_groups)
        stats = stats_vector(loss, global_norm, lr, self.mindwatch_group_lr)
        if self.mindwatch_cpu_check:
            cond = ops.logical_not(ops.isfinite(ops.reshape(global_norm, ())))
        else:
            cond = super().get_overflow_status(status, compute_output)
        cond = ops.depend(cond, self.mindwatch_optimizer_state)
        if self.mindwatch_share:
            apply, stats = self.mindwatch_verdict(stats, self.grad_reducer.local_sq)
        else:
            apply, stats = self.mindwatch_verdict(stats)
        cond = ops.depend(cond, ops.assign(self.mindwatch_stats, stats))
        return cond, apply

    def process_loss_scale(self, overflow):
        cond, apply = overflow
        overflow = super().process_loss_scale(cond)
        return ops.logical_or(overflow, ops.logical_not(apply))

    # -- the host's side ---------------------------------------------------------------
    def adopt(self, grad_explode: float) -> None:
        """``MindWatchMonitor`` drives this cell: its ``grad_explode`` bounds the norm."""
        object.__setattr__(self, "_adopted", True)
        self.mindwatch_verdict.set_grad_explode(grad_explode)

    def __call__(self, *inputs):
        object.__setattr__(self, "last_inputs", inputs)     # references, for replay
        if not self._adopted and not self._said_alone:
            object.__setattr__(self, "_said_alone", True)
            warnings.warn(WITHOUT_MONITOR, stacklevel=2)
        if not self.state_due:
            return super().__call__(*inputs)
        self.state_due = False                  # one state step per request
        before = copies_before(self.optimizer)
        outputs = super().__call__(*inputs)
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
        """The last step once more on its inputs, its update withheld whatever it finds; the
        loss scale's Parameters are put back afterwards (a replay is no step of the loss
        scale's). None before a first step."""
        if self.last_inputs is None:
            return None
        kept = [(p, p.asnumpy().copy()) for p in self._loss_scale_state()]
        try:
            with self.mindwatch_verdict.withholding():
                return super().__call__(*self.last_inputs)
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
