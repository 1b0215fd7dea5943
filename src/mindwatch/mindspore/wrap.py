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

# Output layout of MonitoredTrainStep, read by the callback (outputs.py).
OUTPUT_FIELDS = ("loss", "grad_norm", "lr", "skipped", "grads_finite", "param_sq_norms")

_square_sum = ops.MultitypeFuncGraph("mindwatch_square_sum")
_scale = ops.MultitypeFuncGraph("mindwatch_scale")
_is_finite = ops.MultitypeFuncGraph("mindwatch_is_finite")


@_square_sum.register("Tensor")
def _square_sum_tensor(grad):
    # float32 accumulation: a float16 sum of squares overflows at a norm of only ~256.
    grad = grad.astype(ms.float32)
    return ops.reduce_sum(grad * grad)


@_scale.register("Tensor", "Tensor")
def _scale_tensor(factor, grad):
    return grad * factor.astype(grad.dtype)


@_is_finite.register("Tensor")
def _is_finite_tensor(grad):
    return ops.isfinite(grad).all()


class MonitoredTrainStep(nn.Cell):
    """``network`` returns the loss; each call runs forward, backward, (reduce), measure,
    (clip), and the optimizer update unless the step is anomalous and skipping is on.

    Outputs, in order (see OUTPUT_FIELDS): loss, pre-clip global L2 norm (float32 scalar),
    LR used at this step (scalar, or 1-D with one entry per group), update skipped (bool),
    all gradients finite (bool), per-parameter squared norms (1-D float32, in the order of
    ``optimizer.parameters``; for per-layer norms).
    """

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer, *, grad_explode: float,
                 clip_grad_norm: Optional[float] = None, skip_anomalous_updates: bool = True,
                 sens: float = 1.0):
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
        square_sums = self.hyper_map(_square_sum, grads)
        param_sq_norms = ops.stack(square_sums)
        grad_norm = ops.sqrt(param_sq_norms.sum())
        grads_finite = ops.stack(self.hyper_map(_is_finite, grads)).all()
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
        return loss, grad_norm, lr, ops.logical_not(apply), grads_finite, param_sq_norms
