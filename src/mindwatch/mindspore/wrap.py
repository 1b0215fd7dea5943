"""The monitored train step: one optimizer step that also measures the gradients.

Gradients never reach a callback in MindSpore (a ``Parameter`` has no ``.grad``), so the
global norm must be computed inside the train cell and returned with the loss. Computing it
here, after the data-parallel gradient reduction and before clipping, makes it the number
every rank agrees on and the number people mean by "grad norm".
"""
from __future__ import annotations

import contextlib
import math
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.nn.wrap.grad_reducer import DistributedGradReducer

from ..settings import check_bool, check_number
from .activation_probe import ActivationProbes
from .compat import parallel_context
from .distributed import current_rank
from .graph_sums import (
    after,
    as_float32,
    scale,
    square_sum,
    square_sum_tensor,
    update_square_sum,
)
from .lr import group_indices
from .state_probe import layout_of, moments_of, state_vector, weights_before

# Layout of the ``stats`` output (float32 vector), read by the callback (outputs.py). Packing
# the numbers into one tensor costs one device-to-host copy per step instead of three.
# Whether the update was applied is not an output: it follows from the norm by one
# comparison, which ``update_applied`` repeats on the host (every graph kernel costs ~20 us
# of launch on the CPU, more than its arithmetic).
STAT_LOSS, STAT_GRAD_NORM, STAT_LR = 0, 1, 2     # LRs from 2 on, one per parameter group
# With skipping under data parallelism, after the LRs: each rank's squared norm of its own
# gradients (one entry per rank), then how many ranks found their step anomalous (summed over
# the ranks, in the graph), which the host needs to repeat the decision and cannot derive
# from its own loss.

# Parameters of mindwatch's own making in the train cell (the step limits): left out of
# checkpoints and snapshots, since the host recomputes them.
OWN_PREFIX = "mindwatch_"
# "No limit" in the graph: the largest float32, not inf, so that +inf itself is past it.
FLOAT32_MAX = float(np.finfo(np.float32).max)

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

class MonitoredTrainStep(nn.Cell):
    """``network`` returns the loss; each call runs forward, backward, (reduce), measure,
    (clip), and the optimizer update unless the step is anomalous and skipping is on.

    Outputs: ``(loss, stats)``, plus ``param_sq_norms`` (squared L2 norm of each gradient,
    in the order of ``optimizer.parameters``) with ``per_layer_norms=True``, plus the tuple
    of the network's other outputs with ``has_aux=True``. ``stats`` is a
    float32 vector: the loss, the pre-clip global L2 norm, then the LR used at this step,
    one entry per parameter group.

    With ``skip_anomalous_updates`` the update is applied only when every entry of the
    ``stats`` vector lies within its bounds: the loss finite and at most the loss limit, the
    norm at most ``grad_explode`` (or the spike limit, whichever is lower), every LR
    non-negative and at most the LR limit. A NaN or Inf anywhere in the gradients makes the
    norm non-finite, which fails its bound too. The price: finite gradients whose squares
    overflow float32 (norm above ~1.8e19) count as non-finite, which withholds the update
    all the same. The upper bounds are one Parameter vector the host sets between steps
    (``set_limits``: the spike limits under on_anomaly "skip", the LR limit, see
    skipping.py), read in the condition, outside the branch; "no limit" is the largest
    float32, so a non-finite value is always past it. Four vector kernels decide every rule
    at once (~80 us on the CPU). Under data parallelism the ranks' verdicts are summed in
    the graph (one scalar AllReduce), so a loss that is non-finite or spiking on one rank
    withholds the update on every rank and the replicas stay identical.

    On the CPU the ``if`` around the optimizer costs a fixed ~1 ms per step (5% of the demo
    model's 24 ms step): MindSpore runs each branch as its own kernel graph there. On Ascend
    it compiles to in-graph conditional kernels ("switch inline").

    State steps (``state_due`` set before a call): that call runs a second graph of the same
    step, compiled on its first use, which also measures the weights, the update and the
    optimizer's moments (state_probe.py); ``last_state`` then holds its vector, and the
    outputs are the ordinary ones. The ordinary graph has no trace of it. ``probes``: the
    sub-Cells whose outputs the state graph measures too (activation_probe.py).
    """

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer, *, grad_explode: float,
                 clip_grad_norm: float | None = None, skip_anomalous_updates: bool = True,
                 sens: float = 1.0, per_layer_norms: bool = False, has_aux: bool = False,
                 with_state: bool = False, limits: ms.Parameter | None = None,
                 probes: ActivationProbes | None = None):
        super().__init__(auto_prefix=False)
        self._options: dict[str, Any] = {
            "grad_explode": grad_explode, "clip_grad_norm": clip_grad_norm,
            "skip_anomalous_updates": skip_anomalous_updates, "sens": sens,
            "per_layer_norms": per_layer_norms, "has_aux": has_aux}
        # The state graph's twin (``state_variant``) sets this: a compile-time constant.
        self.with_state = with_state
        # ``network`` returns (loss, *aux), as a forward_fn for value_and_grad(has_aux=True):
        # the gradient is the loss's alone, and aux is passed through as the last output.
        self.has_aux = has_aux
        self.network = network
        self.network.set_grad()
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.sens = float(sens)
        self.hyper_map = ops.HyperMap()
        # The norm's bound as the graph holds it; a spike limit can only lower it.
        self._norm_cap = _bound(grad_explode)
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
        parallel = parallel_context()
        if parallel.data_parallel:
            self.grad_reducer = DistributedGradReducer(self.weights, parallel.gradients_mean,
                                                       parallel.device_num)
        self.share_verdict = skip_anomalous_updates and parallel.data_parallel
        # Shared with the verdict, in its AllReduce: every rank's squared norm of its own
        # gradients before the reduction (each rank fills its slot of a zero vector), so a
        # gradient anomaly can name the rank whose gradients caused it (one more pass over
        # the gradients per step, under data parallelism only).
        world = parallel.device_num if self.share_verdict else 0
        self.rank = current_rank().rank
        self.rank_slot = ms.Tensor(np.eye(world, dtype=np.bool_)[self.rank]) if world else None
        self.rank_zeros = ms.Tensor(np.zeros(world, np.float32)) if world else None
        self.stats_lr_end = -(world + 1) if self.share_verdict else None
        # The bounds of the stats vector (loss, norm, LR per group), as float32 values: the
        # graph's, repeated on the host by ``update_applied``.
        lrs = len(self.lr_group_indices) if self.group_lr else 1
        self._lower = (-FLOAT32_MAX, 0.0) + (0.0,) * lrs
        self._upper = (FLOAT32_MAX, self._norm_cap) + (FLOAT32_MAX,) * lrs
        if skip_anomalous_updates:
            self.lower_bounds = ms.Tensor(np.array(self._lower, np.float32))
            # the state variant reads its twin's limits: one Parameter, written once
            self.upper_bounds = limits if limits is not None else ms.Parameter(
                ms.Tensor(np.array(self._upper, np.float32)), name=OWN_PREFIX + "step_limits",
                requires_grad=False)
        if self.share_verdict:
            # SUM of 0/1 flags: MindSpore's CPU AllReduce has no MAX.
            self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM)
        self.first_moments, self.second_moments = moments_of(optimizer, self.weights)
        self.state_layout = layout_of(self.weights, self.first_moments, self.second_moments)
        self.state_due = False
        self.last_state = None
        object.__setattr__(self, "last_inputs", None)
        object.__setattr__(self, "probes", probes)
        # Built on first use, and kept out of the Cell tree: it is another top-level graph
        object.__setattr__(self, "_state_variant", None)

    @classmethod
    def checked(cls, network: nn.Cell, optimizer: nn.Optimizer, *, grad_explode: float,
                clip_grad_norm: float | None, skip_anomalous_updates: bool, sens: float,
                per_layer_norms: bool, has_aux: bool = False,
                probes: ActivationProbes | None = None) -> MonitoredTrainStep:
        """The step, after the user's options are checked (TypeError or ValueError naming
        the bad one)."""
        if not isinstance(optimizer, nn.Optimizer):
            raise TypeError("optimizer must be a mindspore.nn.Optimizer; got "
                            f"{type(optimizer).__name__}")
        check_number("clip_grad_norm", clip_grad_norm, low=0.0, low_open=True, optional=True)
        check_bool("skip_anomalous_updates", skip_anomalous_updates)
        check_number("sens", sens, low=0.0, low_open=True)
        check_bool("per_layer_norms", per_layer_norms)
        check_bool("has_aux", has_aux)
        return cls(network, optimizer, grad_explode=grad_explode, clip_grad_norm=clip_grad_norm,
                   skip_anomalous_updates=skip_anomalous_updates, sens=sens,
                   per_layer_norms=per_layer_norms, has_aux=has_aux, probes=probes)

    def _global_square_sum(self, grads):
        """The squared global norm (float32 scalar), summed as OWN_SUM_MIN_ELEMENTS says."""
        sums = [square_sum_tensor(grads[i]) for i in self.summed_alone]
        small = [as_float32(ops.reshape(grads[i], (-1,))) for i in self.summed_together]
        if small:
            vector = ops.cat(small) if len(small) > 1 else small[0]
            sums.append(ops.reduce_sum(vector * vector))
        return sums[0] if len(sums) == 1 else ops.stack(sums).sum()

    def _current_lr(self):
        lr = self.optimizer.get_lr()
        if self.group_lr:
            return ops.stack([ops.reshape(lr[i], ()) for i in self.lr_group_indices])
        return ops.reshape(lr, ())

    def update_applied(self, stats: list[float]) -> bool:
        """The graph's decision, repeated on the host from the returned ``stats`` (float32
        values against the float32 bounds the graph held, so comparing them in float64 gives
        the float32 answer). NaN compares False."""
        if not self.skip_anomalous:
            return True
        if self.share_verdict:
            return stats[-1] < 0.5
        return self.within_bounds(stats)

    def set_limits(self, *, loss: float = math.inf, grad_norm: float = math.inf,
                   lr: float = math.inf) -> None:
        """The limits of the next step: withhold its update when the loss is above ``loss``,
        the norm above ``grad_norm`` (``grad_explode`` whatever this says) or any group's LR
        above ``lr``; ``inf`` is no limit, and non-finite values are past every limit. The
        Parameter is written only when a float32 bound changes (a host-to-device copy), in
        place: a graph that ``ms.jit`` compiled in PyNative mode keeps reading the tensor a
        Parameter had, and never sees a ``set_data``."""
        if not self.skip_anomalous:
            return
        lrs = len(self._upper) - 2
        self._write_upper((_bound(loss), min(_bound(grad_norm), self._norm_cap))
                          + (_bound(lr),) * lrs)

    def _write_upper(self, upper: tuple[float, ...]) -> None:
        if upper != self._upper:
            ops.assign(self.upper_bounds, ms.Tensor(np.array(upper, np.float32)))
            self._upper = upper

    def within_bounds(self, stats: list[float]) -> bool:
        """This rank's ``stats`` within the bounds the graph holds (the ranks' shared
        verdict, under data parallelism, left aside)."""
        own = stats[:self.stats_lr_end]
        return all(low <= value <= high
                   for value, low, high in zip(own, self._lower, self._upper, strict=True))

    def replay(self, run=None):
        """The last step computed again on its inputs and the weights as they are, its
        update withheld whatever it finds: the ordinary graph (no compile: ``run``, the
        compiled function calling this Cell, when one does) with every loss past its
        limit. Returns its outputs; None without skipping (nothing was withheld) or before
        a first step."""
        if not self.skip_anomalous or self.last_inputs is None:
            return None
        upper = self._upper
        self._write_upper((-FLOAT32_MAX, *upper[1:]))
        try:
            return (run or super().__call__)(*self.last_inputs)
        finally:
            self._write_upper(upper)

    def __call__(self, *inputs):
        object.__setattr__(self, "last_inputs", inputs)     # references, for replay
        if not self.state_due:
            return super().__call__(*inputs)
        self.state_due = False                  # one state step per request
        with self.recording():
            return self.keep_state(self.state_variant()(*inputs))

    def recording(self) -> contextlib.AbstractContextManager:
        """Around the state graph's calls: the probed sub-Cells measure their outputs."""
        return self.probes.recording() if self.probes else contextlib.nullcontext()

    def state_variant(self) -> MonitoredTrainStep:
        """The state graph's Cell: this step over the same Parameters (the limits too),
        whose output ends with the state vector; built on first use."""
        variant = self._state_variant
        if variant is None:
            variant = type(self)(self.network, self.optimizer, **self._options, with_state=True,
                                 limits=getattr(self, "upper_bounds", None))
            object.__setattr__(self, "_state_variant", variant)
        return variant

    def keep_state(self, outputs):
        """The state variant's outputs as the ordinary ones; its vector in ``last_state``."""
        self.last_state = outputs[-1]
        return outputs[:-1]

    def construct(self, *inputs):
        outputs = self.network(*inputs)
        if self.has_aux:
            loss = outputs[0]
            # a tuple concatenation: graph mode parses it, not a starred tuple display
            zeros = self.hyper_map(ops.zeros_like, outputs[1:])
            sens = (ops.ones_like(loss) * self.sens,) + zeros  # noqa: RUF005
        else:
            loss = outputs
            sens = ops.ones_like(loss) * self.sens
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        if self.share_verdict:
            # summed before the reduction runs, whose AllReduce may reuse the gradients'
            # memory for its result
            local_sq = self._global_square_sum(grads)
            grads = self.hyper_map(ops.partial(after, local_sq), grads)
        grads = self.grad_reducer(grads)
        if self.per_layer_norms or self.with_state:
            param_sq_norms = ops.stack(self.hyper_map(square_sum, grads))
            grad_norm = ops.sqrt(param_sq_norms.sum())
        else:
            grad_norm = ops.sqrt(self._global_square_sum(grads))
        if self.with_state:
            before = weights_before(self.hyper_map, self.weights)
            grads = ops.depend(grads, before)   # copied before the optimizer writes
        if self.clip:
            factor = self.clip_norm / ops.maximum(grad_norm, self.clip_norm)
            grads = self.hyper_map(ops.partial(scale, factor), grads)
        # Read before the update: afterwards global_step points at the next step. And read
        # here, not inside the branch: in GRAPH_MODE a Parameter that only a branch reads
        # misses later set_data calls from Python (measured on MindSpore 2.10, CPU), so an LR
        # knob or a fixed LR changed between steps would be read stale. The price is a
        # schedule evaluated twice per step, once here and once by the optimizer.
        lr = self._current_lr()
        loss_f32 = as_float32(ops.reshape(loss, ()))
        if self.group_lr:
            stats = ops.concat((ops.stack((loss_f32, grad_norm)), as_float32(lr)))
        else:
            stats = ops.stack((loss_f32, grad_norm, as_float32(ops.reshape(lr, ()))))
        if self.skip_anomalous:
            # For the same reason every optimizer state Parameter (moments, beta powers) is
            # loaded here: read only inside the branch, a checkpoint loaded into them with
            # load_param_into_net between steps would be ignored, and the branch would go on
            # updating a detached copy. A depend adds no kernel.
            loss = ops.depend(loss, self.optimizer_state)
            # The bounds are read here, in the condition, outside the branch.
            within = ops.logical_and(stats <= self.upper_bounds, stats >= self.lower_bounds)
            apply = ops.all(within)
            if self.share_verdict:
                past = ops.cast(ops.logical_not(ops.reshape(apply, (1,))), ms.float32)
                # select, not a product with a one-hot vector: 0 * NaN is NaN, and this
                # rank's NaN would fill every other rank's slot
                mine = ops.select(self.rank_slot, ops.zeros_like(self.rank_zeros) + local_sq,
                                  self.rank_zeros)
                shared = self.all_reduce(ops.concat((mine, past)))
                apply = ops.reshape(shared[-1:], ()) < 0.5
                stats = ops.concat((stats, shared))
            if apply:
                loss = ops.depend(loss, self.optimizer(grads))
        else:
            loss = ops.depend(loss, self.optimizer(grads))
        result = (loss, stats)  # type: tuple[Any, ...]
        if self.per_layer_norms:
            result = result + (param_sq_norms,)  # noqa: RUF005 (graph mode: no starred tuple)
        if self.has_aux:
            result = result + (outputs[1:],)  # noqa: RUF005
        if self.with_state:
            # Read after the optimizer's branch, explicitly: with other side effects in the
            # graph (the activation probes' writes) MindSpore 2.10 otherwise loads some
            # weights before the update was written (measured: update norms 4x too small).
            weights, first, second = self.hyper_map(ops.partial(after, loss), (
                self.weights, self.first_moments or (), self.second_moments or ()))
            state = state_vector(square_sum, update_square_sum, self.hyper_map, weights,
                                 before, param_sq_norms,
                                 first if self.first_moments is not None else None,
                                 second if self.second_moments is not None else None)
            result = result + (state,)  # noqa: RUF005
        return result


def _bound(value: float) -> float:
    """An upper bound as the graph holds it: rounded to float32 as set_data stores it, and
    at most the largest float32 (beyond its range, or inf: no limit, yet +inf is past it)."""
    with np.errstate(over="ignore"):
        rounded = float(np.float32(value))
    return min(rounded, FLOAT32_MAX) if not math.isnan(rounded) else FLOAT32_MAX

