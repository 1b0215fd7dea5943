"""The monitored train step: one optimizer step that also measures the gradients.

Gradients never reach a callback in MindSpore (a ``Parameter`` has no ``.grad``), so the
global norm must be computed inside the train cell and returned with the loss. Computing it
here, after the data-parallel gradient reduction and before clipping, makes it the number
every rank agrees on and the number people mean by "grad norm".
"""
from __future__ import annotations

from typing import Optional

import mindspore as ms
from mindspore import nn, ops
from mindspore.context import ParallelMode
from mindspore.nn.wrap.grad_reducer import DistributedGradReducer
from mindspore.parallel._utils import _get_device_num, _get_gradients_mean, _get_parallel_mode

from .lr import group_indices

# Layout of the ``stats`` output (float32 vector), read by the callback (outputs.py). Packing
# the numbers into one tensor costs one device-to-host copy per step instead of five.
STAT_LOSS, STAT_GRAD_NORM, STAT_SKIPPED, STAT_FINITE, STAT_LR = 0, 1, 2, 3, 4  # LRs from 4 on

# Below this many gradient elements the norm is taken over one concatenated vector: one
# reduction instead of one per parameter costs 2-4x less on the CPU, for the demo (76k
# parameters) and still at 2M (measured: 0.15 vs 0.48 ms, 2.4 vs 9.7 ms). Above it the
# concatenated copy would cost real memory (a 7B model's gradients are 28 GB in float32), so
# the norm goes per parameter, as it does with per_layer_norms.
FUSED_NORM_MAX_ELEMENTS = 1 << 24

_square_sum = ops.MultitypeFuncGraph("mindwatch_square_sum")
_scale = ops.MultitypeFuncGraph("mindwatch_scale")


@_square_sum.register("Tensor")
def _square_sum_tensor(grad):
    # float32 accumulation: a float16 sum of squares overflows at a norm of only ~256.
    # Flattened first: MindSpore's CPU reduce over all axes of a 2-D tensor is ~3x slower
    # than over the same elements in 1-D.
    flat = ops.reshape(grad, (-1,))
    if flat.dtype != ms.float32:
        flat = flat.astype(ms.float32)
    return ops.reduce_sum(ops.square(flat))


@_scale.register("Tensor", "Tensor")
def _scale_tensor(factor, grad):
    return grad * factor.astype(grad.dtype)


class MonitoredTrainStep(nn.Cell):
    """``network`` returns the loss; each call runs forward, backward, (reduce), measure,
    (clip), and the optimizer update unless the step is anomalous and skipping is on.

    Outputs: ``(loss, stats)``, plus ``param_sq_norms`` (squared L2 norm of each gradient,
    in the order of ``optimizer.parameters``) with ``per_layer_norms=True``. ``stats`` is a
    float32 vector: the loss, the pre-clip global L2 norm, update skipped (0/1), gradients
    finite (0/1), then the LR used at this step, one entry per parameter group.

    "Gradients finite" is read off the sum of squares: a NaN or Inf anywhere makes it
    non-finite. That saves a pass over every gradient; the price is that finite gradients
    whose squares overflow float32 (norm above ~1.8e19) also count as non-finite, which
    withholds the update all the same.
    """

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer, *, grad_explode: float,
                 clip_grad_norm: Optional[float] = None, skip_anomalous_updates: bool = True,
                 sens: float = 1.0, per_layer_norms: bool = False):
        super().__init__(auto_prefix=False)
        self.network = network
        self.network.set_grad()
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.sens = float(sens)
        self.hyper_map = ops.HyperMap()
        self.grad_explode = ms.Tensor(grad_explode, ms.float32)
        self.clip = clip_grad_norm is not None
        self.clip_norm = ms.Tensor(clip_grad_norm if self.clip else 1.0, ms.float32)
        self.skip_anomalous = skip_anomalous_updates
        self.per_layer_norms = per_layer_norms
        self.fused_norm = (not per_layer_norms and
                           sum(p.size for p in self.weights) <= FUSED_NORM_MAX_ELEMENTS)
        self.group_lr = bool(getattr(optimizer, "is_group_lr", False))
        self.lr_group_indices = tuple(group_indices(optimizer))
        self.grad_reducer = nn.Identity()
        # Reduce exactly as nn.TrainOneStepCell does in data-parallel mode, so the norm is
        # measured on the gradients the optimizer applies, identical on every rank.
        if _get_parallel_mode() in (ParallelMode.DATA_PARALLEL, ParallelMode.HYBRID_PARALLEL):
            self.grad_reducer = DistributedGradReducer(self.weights, _get_gradients_mean(),
                                                       _get_device_num())

    def _current_lr(self):
        lr = self.optimizer.get_lr()
        if self.group_lr:
            return ops.stack([ops.reshape(lr[i], ()) for i in self.lr_group_indices])
        return ops.reshape(lr, ())

    def construct(self, *inputs):
        loss = self.network(*inputs)
        sens = ops.ones_like(loss) * self.sens
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        grads = self.grad_reducer(grads)
        if self.fused_norm:
            flat = ops.cat([ops.reshape(g, (-1,)).astype(ms.float32) for g in grads])
            grad_norm = ops.sqrt(ops.reduce_sum(ops.square(flat)))
        else:
            param_sq_norms = ops.stack(self.hyper_map(_square_sum, grads))
            grad_norm = ops.sqrt(param_sq_norms.sum())
        grads_finite = ops.isfinite(grad_norm)
        # Read before the optimizer runs: afterwards its global_step points at the next step.
        lr = self._current_lr()
        if self.clip:
            factor = self.clip_norm / ops.maximum(grad_norm, self.clip_norm)
            grads = self.hyper_map(ops.partial(_scale, factor), grads)
        if self.skip_anomalous:
            apply = ops.logical_and(grads_finite, grad_norm <= self.grad_explode)
        else:
            apply = ops.ones_like(grads_finite)
        if apply:
            loss = ops.depend(loss, self.optimizer(grads))
        stats = ops.concat((ops.stack((ops.reshape(loss, ()).astype(ms.float32), grad_norm,
                                       ops.logical_not(apply).astype(ms.float32),
                                       grads_finite.astype(ms.float32))),
                            ops.reshape(lr.astype(ms.float32), (-1,))))
        if self.per_layer_norms:
            return loss, stats, param_sq_norms
        return loss, stats
