"""The monitored train step: one optimizer step that also measures the gradients.

Gradients never reach a callback in MindSpore (a ``Parameter`` has no ``.grad``), so the
global norm must be computed inside the train cell and returned with the loss. Computing it
here, after the data-parallel gradient reduction and before clipping, makes it the number
every rank agrees on and the number people mean by "grad norm".
"""
from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.context import ParallelMode
from mindspore.nn.wrap.grad_reducer import DistributedGradReducer
from mindspore.parallel._utils import _get_device_num, _get_gradients_mean, _get_parallel_mode

from .lr import group_indices

# Layout of the ``stats`` output (float32 vector), read by the callback (outputs.py). Packing
# the numbers into one tensor costs one device-to-host copy per step instead of three.
# Whether the update was applied is not an output: it follows from the norm by one
# comparison, which ``update_applied`` repeats on the host (every graph kernel costs ~20 us
# of launch on the CPU, more than its arithmetic).
STAT_LOSS, STAT_GRAD_NORM, STAT_LR = 0, 1, 2     # LRs from 2 on, one per parameter group
# With a loss limit under data parallelism, one more entry after the LRs: how many ranks'
# losses were past their limit (summed over the ranks, in the graph), which the host needs
# to repeat the decision and cannot derive from its own loss.

# How the squared global norm is summed. A gradient of at least this many elements is summed
# on its own, row by row, so the runtime can sum it as soon as backward has produced it, while
# backward goes on with the others; the small ones (biases, LayerNorm gains: dozens of tensors,
# few elements) are concatenated and summed at once, three kernels instead of three each.
# One sum over every gradient concatenated waits for the last gradient and copies them all.
# MindSpore's profiler on the CPU (d256/4-layer TinyGPT, 54 gradients, 2.1M elements): the
# step ends 9.1 ms after backward's last gradient with one concatenated sum, 7.7 ms with this
# split, 5.5 ms in the bare step without the norm and the `if`. No large gradient is ever
# copied, so the norm's memory does not grow with the model.
OWN_SUM_MIN_ELEMENTS = 1 << 16

_square_sum = ops.MultitypeFuncGraph("mindwatch_square_sum")
_scale = ops.MultitypeFuncGraph("mindwatch_scale")


@_square_sum.register("Tensor")
def _square_sum_tensor(grad):
    return ops.reduce_sum(_row_square_sums(grad))


def _row_square_sums(grad):
    """Per-row sums of squares (rows: the first axis), float32. Row by row, not over all
    axes at once: MindSpore's CPU reduction over every axis of a 2-D tensor is ~3x slower, and
    float32 partial sums of one row lose less precision than one long sum. ``g * g``, not
    ``square``: the same values, and the faster CPU kernel. float32 first: a float16 sum of
    squares overflows at a norm of only ~256."""
    grad = _as_float32(grad)
    if grad.ndim < 2:
        grad = ops.reshape(grad, (-1,))
        return grad * grad
    if grad.ndim > 2:
        grad = ops.reshape(grad, (grad.shape[0], -1))
    return ops.reduce_sum(grad * grad, 1)


@_scale.register("Tensor", "Tensor")
def _scale_tensor(factor, grad):
    return grad * factor.astype(grad.dtype)


class MonitoredTrainStep(nn.Cell):
    """``network`` returns the loss; each call runs forward, backward, (reduce), measure,
    (clip), and the optimizer update unless the step is anomalous and skipping is on.

    Outputs: ``(loss, stats)``, plus ``param_sq_norms`` (squared L2 norm of each gradient,
    in the order of ``optimizer.parameters``) with ``per_layer_norms=True``. ``stats`` is a
    float32 vector: the loss, the pre-clip global L2 norm, then the LR used at this step,
    one entry per parameter group.

    The update is applied when ``grad_norm <= grad_explode``. A NaN or Inf anywhere in the
    gradients makes the norm non-finite, which fails that comparison too, so one comparison
    covers both rules. The price: finite gradients whose squares overflow float32 (norm
    above ~1.8e19) count as non-finite, which withholds the update all the same.

    ``limit_loss``/``limit_grad_norm`` (on_anomaly "skip", see skipping.py): the update is
    also withheld when the loss is above ``loss_limit`` (or NaN) or the norm above
    ``grad_bound`` (``grad_explode`` or the spike limit, whichever is lower). Both are
    Parameters the host sets between steps (``set_limits``), read in the condition, outside
    the branch. Under data parallelism the ranks' loss verdicts are summed in the graph, so a
    loss spike on one rank withholds the update on every rank.

    On the CPU the ``if`` around the optimizer costs a fixed ~1 ms per step (5% of the demo
    model's 24 ms step): MindSpore runs each branch as its own kernel graph there. On Ascend
    it compiles to in-graph conditional kernels ("switch inline").
    """

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer, *, grad_explode: float,
                 clip_grad_norm: float | None = None, skip_anomalous_updates: bool = True,
                 sens: float = 1.0, per_layer_norms: bool = False, limit_loss: bool = False,
                 limit_grad_norm: bool = False):
        super().__init__(auto_prefix=False)
        self.network = network
        self.network.set_grad()
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.sens = float(sens)
        self.hyper_map = ops.HyperMap()
        self.grad_explode = ms.Tensor(grad_explode, ms.float32)
        # The same threshold as the graph compares against, rounded to float32 the same way.
        self._grad_explode_f32 = float(np.float32(grad_explode))
        self.clip = clip_grad_norm is not None
        self.clip_norm = ms.Tensor(clip_grad_norm if self.clip else 1.0, ms.float32)
        self.skip_anomalous = skip_anomalous_updates
        self.per_layer_norms = per_layer_norms
        # Compile-time partition of the gradients by index (see OWN_SUM_MIN_ELEMENTS).
        self.summed_alone = tuple(i for i, p in enumerate(self.weights)
                                  if p.size >= OWN_SUM_MIN_ELEMENTS)
        self.summed_together = tuple(i for i, p in enumerate(self.weights)
                                     if p.size < OWN_SUM_MIN_ELEMENTS)
        weight_ids = {id(p) for p in self.weights}
        # The optimizer's own Parameters (moments, step counter, LR); see construct.
        self.optimizer_state = ms.ParameterTuple(
            p for p in optimizer.get_parameters() if id(p) not in weight_ids)
        self.group_lr = bool(getattr(optimizer, "is_group_lr", False))
        self.lr_group_indices = tuple(group_indices(optimizer))
        self.grad_reducer = nn.Identity()
        # Reduce exactly as nn.TrainOneStepCell does in data-parallel mode, so the norm is
        # measured on the gradients the optimizer applies, identical on every rank.
        data_parallel = _get_parallel_mode() in (ParallelMode.DATA_PARALLEL,
                                                 ParallelMode.HYBRID_PARALLEL)
        if data_parallel:
            self.grad_reducer = DistributedGradReducer(self.weights, _get_gradients_mean(),
                                                       _get_device_num())
        # Compile-time switches: without "skip" the graph is the one without limits.
        self.limit_loss = skip_anomalous_updates and limit_loss
        self.limit_grad_norm = skip_anomalous_updates and limit_grad_norm
        self.share_loss_verdict = self.limit_loss and data_parallel
        self.stats_lr_end = -1 if self.share_loss_verdict else None
        self._loss_limit_f32 = math.inf
        self._grad_bound_f32 = self._grad_explode_f32
        if self.limit_loss:
            self.loss_limit = _limit("mindwatch_loss_limit", math.inf)
        if self.limit_grad_norm:
            self.grad_bound = _limit("mindwatch_grad_bound", self._grad_explode_f32)
        if self.share_loss_verdict:
            # SUM of 0/1 flags: MindSpore's CPU AllReduce has no MAX.
            self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM)

    def _global_square_sum(self, grads):
        """The squared global norm (float32 scalar), summed as OWN_SUM_MIN_ELEMENTS says."""
        sums = [_square_sum_tensor(grads[i]) for i in self.summed_alone]
        small = [_as_float32(ops.reshape(grads[i], (-1,))) for i in self.summed_together]
        if small:
            vector = ops.cat(small) if len(small) > 1 else small[0]
            sums.append(ops.reduce_sum(vector * vector))
        return sums[0] if len(sums) == 1 else ops.stack(sums).sum()

    def _current_lr(self):
        lr = self.optimizer.get_lr()
        if self.group_lr:
            return ops.stack([ops.reshape(lr[i], ()) for i in self.lr_group_indices])
        return ops.reshape(lr, ())

    def update_applied(self, grad_norm: float, loss: float | None = None,
                       ranks_past_limit: float | None = None) -> bool:
        """The graph's decision, repeated on the host from the returned values (float32
        values against the float32 limits, so comparing them in float64 gives the float32
        answer). NaN compares False. ``ranks_past_limit``: the summed flag the graph returns
        under data parallelism with a loss limit."""
        if not self.skip_anomalous:
            return True
        if not grad_norm <= self._grad_bound_f32:
            return False
        if self.share_loss_verdict:
            return ranks_past_limit is not None and ranks_past_limit < 0.5
        if self.limit_loss:
            return loss is not None and loss <= self._loss_limit_f32
        return True

    def set_limits(self, loss: float, grad_norm: float) -> None:
        """The limits of the next step (on_anomaly "skip"): withhold its update when the loss
        is above ``loss`` or the norm above ``grad_norm`` (``inf``: no limit). A Parameter is
        written only when its float32 value changes: set_data is a host-to-device copy."""
        if self.limit_loss:
            value = _float32(loss)
            if value != self._loss_limit_f32:
                self.loss_limit.set_data(ms.Tensor(value, ms.float32))
                self._loss_limit_f32 = value
        if self.limit_grad_norm:
            value = min(_float32(grad_norm), self._grad_explode_f32)
            if value != self._grad_bound_f32:
                self.grad_bound.set_data(ms.Tensor(value, ms.float32))
                self._grad_bound_f32 = value

    def construct(self, *inputs):
        loss = self.network(*inputs)
        sens = ops.ones_like(loss) * self.sens
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        grads = self.grad_reducer(grads)
        if self.per_layer_norms:
            param_sq_norms = ops.stack(self.hyper_map(_square_sum, grads))
            grad_norm = ops.sqrt(param_sq_norms.sum())
        else:
            grad_norm = ops.sqrt(self._global_square_sum(grads))
        if self.clip:
            factor = self.clip_norm / ops.maximum(grad_norm, self.clip_norm)
            grads = self.hyper_map(ops.partial(_scale, factor), grads)
        # Read before the update: afterwards global_step points at the next step. And read
        # here, not inside the branch: in GRAPH_MODE a Parameter that only a branch reads
        # misses later set_data calls from Python (measured on MindSpore 2.10, CPU), so an LR
        # knob or a fixed LR changed between steps would be read stale. The price is a
        # schedule evaluated twice per step, once here and once by the optimizer.
        lr = self._current_lr()
        if self.skip_anomalous:
            # For the same reason every optimizer state Parameter (moments, beta powers) is
            # loaded here: read only inside the branch, a checkpoint loaded into them with
            # load_param_into_net between steps would be ignored, and the branch would go on
            # updating a detached copy. A depend adds no kernel.
            loss = ops.depend(loss, self.optimizer_state)
            # The limits are Parameters read here, in the condition, outside the branch.
            apply = grad_norm <= (self.grad_bound if self.limit_grad_norm else self.grad_explode)
            if self.limit_loss:
                loss_ok = _as_float32(ops.reshape(loss, ())) <= self.loss_limit
                if self.share_loss_verdict:
                    past = ops.cast(ops.logical_not(ops.reshape(loss_ok, (1,))), ms.float32)
                    ranks_past_limit = ops.reshape(self.all_reduce(past), ())
                    loss_ok = ranks_past_limit < 0.5
                apply = ops.logical_and(apply, loss_ok)
            if apply:
                loss = ops.depend(loss, self.optimizer(grads))
        else:
            loss = ops.depend(loss, self.optimizer(grads))
        loss_f32 = _as_float32(ops.reshape(loss, ()))
        if self.group_lr:
            stats = ops.concat((ops.stack((loss_f32, grad_norm)), _as_float32(lr)))
        else:
            stats = ops.stack((loss_f32, grad_norm, _as_float32(ops.reshape(lr, ()))))
        if self.share_loss_verdict:
            stats = ops.concat((stats, ops.reshape(ranks_past_limit, (1,))))
        if self.per_layer_norms:
            return loss, stats, param_sq_norms
        return loss, stats


def _limit(name: str, value: float) -> ms.Parameter:
    return ms.Parameter(ms.Tensor(value, ms.float32), name=name, requires_grad=False)


def _float32(value: float) -> float:
    """``value`` rounded to float32 as set_data will store it; beyond its range: inf."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _as_float32(tensor):
    # Compile-time check: a Cast to the same type would still be a kernel launch.
    return tensor if tensor.dtype == ms.float32 else tensor.astype(ms.float32)
