"""The monitored train step: one optimizer step that also measures the gradients.

Gradients never reach a callback in MindSpore (a ``Parameter`` has no ``.grad``), so the
global norm must be computed inside the train cell and returned with the loss. Computing it
here, after the data-parallel gradient reduction and before clipping, makes it the number
every rank agrees on and the number people mean by "grad norm".
"""
from __future__ import annotations

import contextlib
from typing import Any

import mindspore as ms
from mindspore import nn, ops
from mindspore.nn.wrap.grad_reducer import DistributedGradReducer

from ...settings import check_bool, check_number
from ..compat import parallel_context
from ..probes.activation_probe import ActivationProbes
from ..probes.state_probe import layout_of, moments_of, state_vector, weights_before
from ..ranks.distributed import current_rank
from ..reading.outputs import StepOutputs, from_stats
from .graph_sums import (
    after,
    as_float32,
    scale,
    square_sum,
    square_sum_tensor,
    update_square_sum,
)
from .lr import group_indices
from .verdict import StepVerdict, current_lr, stats_vector

# The ``stats`` output (float32 vector), read by the callback (outputs.py), is laid out as
# verdict.py says (STAT_LOSS, ...). Packing the numbers into one tensor costs one
# device-to-host copy per step instead of three. Whether the update was applied is not an
# output: it follows from the stats by a few comparisons, which ``update_applied`` repeats on
# the host (every graph kernel costs ~20 us of launch on the CPU, more than its arithmetic).

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
    ``stats`` vector lies within the bounds ``verdict`` holds (verdict.py: the host sets
    them between steps with ``set_limits``, the spike limits under on_anomaly "skip" and the
    LR limit, see skipping.py).

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
                 with_state: bool = False, verdict: StepVerdict | None = None,
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
        if skip_anomalous_updates:
            # the state variant decides with its twin's verdict: one limits Parameter
            self.verdict = verdict if verdict is not None else StepVerdict(
                grad_explode=grad_explode, world=world, rank=self.rank,
                lr_count=len(self.lr_group_indices) if self.group_lr else 1)
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

    def stats_of(self, outputs) -> list[float]:
        """The ``stats`` vector of what this step returned, as Python floats."""
        return outputs[1].tolist()

    def read(self, outputs) -> StepOutputs:
        return from_stats(
            self.stats_of(outputs), self.verdict if self.skip_anomalous else None,
            param_sq_norms=outputs[2].asnumpy() if self.per_layer_norms else None,
            aux=outputs[-1] if self.has_aux else None)

    def update_applied(self, stats: list[float]) -> bool:
        """The graph's decision, repeated on the host from the returned ``stats``."""
        return self.verdict.update_applied(stats) if self.skip_anomalous else True

    def set_limits(self, **limits: float) -> None:
        """The next step's limits (``StepVerdict.set_limits``); nothing without skipping."""
        if self.skip_anomalous:
            self.verdict.set_limits(**limits)

    def within_bounds(self, stats: list[float]) -> bool:
        """This rank's ``stats`` within the bounds the graph holds (the ranks' shared
        verdict, under data parallelism, left aside)."""
        return self.verdict.within_bounds(stats) if self.skip_anomalous else True

    def replay(self, run=None):
        """The last step computed again on its inputs and the weights as they are, its
        update withheld whatever it finds: the ordinary graph (no compile: ``run``, the
        compiled function calling this Cell, when one does) with every loss past its
        limit. Returns its outputs; None without skipping (nothing was withheld) or before
        a first step."""
        if not self.skip_anomalous or self.last_inputs is None:
            return None
        with self.verdict.withholding():
            return (run or super().__call__)(*self.last_inputs)

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
                                 verdict=getattr(self, "verdict", None))
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
        lr = current_lr(self.optimizer, self.group_lr, self.lr_group_indices)
        stats = stats_vector(loss, grad_norm, lr, self.group_lr)
        if self.skip_anomalous:
            # For the same reason every optimizer state Parameter (moments, beta powers) is
            # loaded here: read only inside the branch, a checkpoint loaded into them with
            # load_param_into_net between steps would be ignored, and the branch would go on
            # updating a detached copy. A depend adds no kernel.
            loss = ops.depend(loss, self.optimizer_state)
            if self.share_verdict:
                apply, stats = self.verdict(stats, local_sq)
            else:
                apply, stats = self.verdict(stats)
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

