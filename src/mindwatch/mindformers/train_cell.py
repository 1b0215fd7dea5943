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
The host's side (the monitor's adoption, state steps, ``replay``) is protected.py's.
"""
from __future__ import annotations

import mindspore as ms
from mindspore import nn, ops

from ..mindspore.step.graph_sums import after, square_sum
from ..mindspore.step.verdict import OWN_PREFIX
from . import compat
from .protected import ProtectedCell, data_parallel_world


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
class MindWatchTrainOneStepCell(ProtectedCell,
                                compat.train_one_step_cell()):  # type: ignore[misc]
    """MindFormers' ``MFTrainOneStepCell`` (same arguments, same outputs) whose update is
    withheld, in the graph, for a non-finite loss or gradients, a norm above
    ``grad_explode``, an LR above its limit and, under ``on_anomaly: skip``, a spike; the
    limits come from ``MindWatchMonitor`` before each step."""

    def __init__(self, network, optimizer, *args, **kwargs):
        super().__init__(network, optimizer, *args, **kwargs)
        self.mindwatch_share, world = data_parallel_world()
        self._mindwatch_init(optimizer, world=world, rank_norms=True)
        if self.mindwatch_share:
            self.grad_reducer = LocalSquareSum(self.grad_reducer)  # type: ignore[has-type]

    # -- in the graph: MindFormers' hooks ------------------------------------------------
    def start_overflow_check(self, pre_cond, compute_input):
        status, compute_input = super().start_overflow_check(pre_cond, compute_input)
        return (status, pre_cond), compute_input

    def get_overflow_status(self, status, compute_output):
        status, loss = status
        global_norm = self.clip_grad_norm(compute_output)[1]
        if self.mindwatch_cpu_check:
            cond = self.mindwatch_cpu_overflow(global_norm)
        else:
            cond = super().get_overflow_status(status, compute_output)
        if self.mindwatch_share:
            return self.mindwatch_decide(cond, loss, global_norm, self.grad_reducer.local_sq)
        return self.mindwatch_decide(cond, loss, global_norm, None)

    def process_loss_scale(self, overflow):
        cond, apply = overflow
        overflow = super().process_loss_scale(cond)
        return ops.logical_or(overflow, ops.logical_not(apply))
