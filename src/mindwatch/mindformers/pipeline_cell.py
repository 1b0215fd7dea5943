"""``MindWatchPipelineCell``: MindFormers' ``MFPipelineWithLossScaleCell`` with mindwatch's
decision in its graph: the cell MindFormers' Trainer builds under pipeline stages
(``parallel_config.pipeline_stage > 1``) and for gradient accumulation
(``runner_config.gradient_accumulation_steps > 1``, semi-automatic parallelism).

In the YAML, one line, beside ``MindWatchMonitor`` in ``callbacks:``::

    runner_wrapper:
      type: MindWatchPipelineCell   # every MFPipelineWithLossScaleCell argument, as before

(MindFormers replaces any other ``runner_wrapper.type`` by its own pipeline cell in those
two cases; with mindwatch imported it keeps mindwatch's, either of the two, as this cell:
compat.py's ``keep_wrapper_type``.)

It extends MindFormers' cell through the hooks its construct calls (compat.py's
``pipeline_cell``), where the gradients are the whole optimizer step's: the micro-batches'
accumulated gradients, clipped. So the decision is taken once per optimizer step, never per
micro-batch. What the one-step cell's hooks get as arguments, this one's get from two taps:

- the loss: ``LossTap`` around the network (MindFormers' micro-batching cell) keeps the
  step's loss, the sum over its micro-batches as MindFormers returns it; mindwatch judges
  and records their mean, as MFLossMonitor prints it;
- the pre-clip global norm: ``NormTap`` around MindFormers' ``ClipGradNorm`` keeps the norm
  it computed (the ``global_norm`` the cell returns, with MindFormers' own reductions over
  model-parallel slices and stages); without ``use_clip_grad`` the hook measures it.

The decision is the same on every rank and every stage: each rank judges what it holds
(the loss is real on the last stage only; elsewhere it is MindFormers' placeholder, within
every bound) and one AllReduce over all ranks sums the verdicts, so a bad loss on the last
stage withholds the update on the first. Under semi-automatic parallelism the gradients are
reduced inside the graph, so no rank holds its own gradients alone: no ``origin_rank`` here.

On the CPU, which runs no semi-automatic parallel graph, the tests build this cell as the
Trainer does and run it in stand-alone mode (docs/mindformers.md says what only Ascend shows).
"""
from __future__ import annotations

from typing import Any

import mindspore as ms
from mindspore import nn, ops

from ..mindspore.compat import parallel_context
from ..mindspore.step.graph_sums import as_float32
from ..mindspore.step.verdict import OWN_PREFIX
from . import compat
from .protected import ProtectedCell


class LossTap(nn.Cell):
    """``network`` whose loss (a scalar, or ``(numerator, denominator)`` with
    ``calculate_per_token_loss``) is also kept in ``loss``, for the cell's hooks; its other
    attributes read through to ``network`` (MindFormers' callbacks read the wrapper's
    ``network``)."""

    def __init__(self, network: nn.Cell):
        super().__init__(auto_prefix=False)
        self.network = network
        self.loss = ms.Parameter(ms.Tensor(0.0, ms.float32), name=OWN_PREFIX + "loss",
                                 requires_grad=False)

    def construct(self, *inputs):
        out = self.network(*inputs)
        loss = out[0] / out[1] if isinstance(out, tuple) else out
        loss = ops.stop_gradient(as_float32(ops.reshape(loss, ())))
        return ops.depend(out, ops.assign(self.loss, loss))

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            # not MindSpore's own probes (bprop, private names): this cell's, as they are
            inner = self.__dict__.get("_cells", {}).get("network")
            if inner is None or name.startswith("_") or name == "bprop":
                raise
            return getattr(inner, name)


class NormTap(nn.Cell):
    """MindFormers' ``ClipGradNorm``, whose pre-clip global norm is also kept in ``norm``."""

    def __init__(self, clip: nn.Cell):
        super().__init__(auto_prefix=False)
        self.clip = clip
        self.norm = ms.Parameter(ms.Tensor(0.0, ms.float32), name=OWN_PREFIX + "grad_norm",
                                 requires_grad=False)

    def construct(self, grads):
        grads, global_norm = self.clip(grads)
        norm = as_float32(ops.reshape(global_norm, ()))
        return grads, ops.depend(global_norm, ops.assign(self.norm, norm))


@compat.register_wrapper
class MindWatchPipelineCell(ProtectedCell, compat.pipeline_cell()):  # type: ignore[misc]
    """MindFormers' ``MFPipelineWithLossScaleCell`` (same arguments, same outputs) whose
    update is withheld, in the graph and on every stage, for a non-finite loss or gradients,
    a norm above ``grad_explode``, an LR above its limit and, under ``on_anomaly: skip``, a
    spike; the limits come from ``MindWatchMonitor`` before each step."""

    def __init__(self, network, optimizer, *args, **kwargs):
        super().__init__(network, optimizer, *args, **kwargs)
        world = parallel_context().device_num
        # MindFormers sums the micro-batches' losses, and its MFLossMonitor prints the mean
        sums = 1 if self.calculate_per_token_loss else self.micro_size
        self._mindwatch_init(optimizer, world=world if world > 1 else 0, rank_norms=False,
                             loss_sums=sums)
        self.network = LossTap(self.network)
        if self.use_clip_grad:
            self.clip_grad_norm = NormTap(self.clip_grad_norm)  # type: ignore[has-type]

    # -- in the graph: MindFormers' hooks ------------------------------------------------
    def get_overflow_status(self, status, compute_output):
        if self.use_clip_grad:
            global_norm = self.clip_grad_norm.norm
        else:
            global_norm = self.clip_grad_norm(compute_output)[1]
        if self.mindwatch_cpu_check:
            cond = self.mindwatch_cpu_overflow(global_norm)
        else:
            cond = super().get_overflow_status(status, compute_output)
        return self.mindwatch_decide(cond, self.network.loss, global_norm, None)

    def process_loss_scale(self, overflow):
        cond, apply = overflow
        overflow = super().process_loss_scale(cond)
        return ops.logical_or(overflow, ops.logical_not(apply))
