"""The in-graph decision of a protected train step, shared by ``wrap``'s step and MindSpore
Transformers' (``mindwatch.mindformers``): the bounds of the step's ``stats`` vector (loss,
pre-clip global norm, the LR of each parameter group), whether the update is applied, and
the host's mirror of what the graph holds.

Every rule is decided at once by four vector kernels (~80 us on the CPU): the loss finite and
at most the loss limit, the norm at most ``grad_explode`` (or the spike limit, whichever is
lower), every LR non-negative and at most the LR limit. A NaN or Inf anywhere in the gradients
makes the norm non-finite, which fails its bound too; so do finite gradients whose squares
overflow float32 (norm above ~1.8e19), which withholds the update all the same. The upper
bounds are one Parameter vector the host writes between steps (``set_limits``), read in the
condition, outside any branch; "no limit" is the largest float32, so a non-finite value is
always past it. Under data parallelism the ranks' verdicts are summed in the graph (one
AllReduce of a small vector), so a loss that is non-finite or spiking on one rank withholds
the update on every rank and the replicas stay identical. The same exchange counts the ranks
whose host withheld the step on purpose (``withholding``: a known bad batch, issue #46), so
every rank can tell that withholding from an anomaly.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from ...recovery.float32_bounds import FLOAT32_MAX, bound
from .graph_sums import as_float32

# Parameters of mindwatch's own making in a train cell (the step limits, the stats a
# MindFormers cell leaves for the callback): left out of checkpoints and snapshots, since
# the host recomputes them.
OWN_PREFIX = "mindwatch_"
STAT_LOSS, STAT_GRAD_NORM, STAT_LR = 0, 1, 2     # LRs from 2 on, one per parameter group
# A loss bound below this is ``withholding``'s (-FLOAT32_MAX): no loss limit comes near it.
_HELD_BELOW = -1e38


class StepVerdict(nn.Cell):
    """``verdict(stats, local_sq)`` -> ``(apply, stats)``. ``lr_count``: the LR entries of
    ``stats``. With ``world`` ranks (data parallelism, pipeline stages; 0: none) the returned
    ``stats`` ends with every rank's squared norm of its own gradients before the reduction
    (``local_sq``, one slot per rank, so a gradient anomaly can name the rank whose gradients
    caused it; not with ``rank_norms=False``, where no rank holds its own gradients alone),
    then how many ranks' hosts withheld the step (``withholding``), then how many ranks found
    their step anomalous (those included)."""

    def __init__(self, *, grad_explode: float, lr_count: int, world: int = 0, rank: int = 0,
                 rank_norms: bool = True):
        super().__init__(auto_prefix=False)
        self.rank = rank
        self._norm_cap = bound(grad_explode)
        self._lower = (-FLOAT32_MAX, 0.0) + (0.0,) * lr_count
        self._upper = (FLOAT32_MAX, self._norm_cap) + (FLOAT32_MAX,) * lr_count
        self.lower_bounds = ms.Tensor(np.array(self._lower, np.float32))
        self.upper_bounds = ms.Parameter(ms.Tensor(np.array(self._upper, np.float32)),
                                         name=OWN_PREFIX + "step_limits", requires_grad=False)
        self.share = world > 0
        self.rank_norms = self.share and rank_norms
        # what the ranks' exchange adds to the stats vector, after the LRs
        self.shared_size = (world if self.rank_norms else 0) + 2 if self.share else 0
        self.stats_lr_end = -self.shared_size if self.share else None
        if self.share:
            # SUM of 0/1 flags: MindSpore's CPU AllReduce has no MAX.
            self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM)
            self.held_below = ms.Tensor(np.array([_HELD_BELOW], np.float32))
        if self.rank_norms:
            self.rank_slot = ms.Tensor(np.eye(world, dtype=np.bool_)[rank])
            self.rank_zeros = ms.Tensor(np.zeros(world, np.float32))

    def construct(self, stats, local_sq=None):
        # The bounds are read here, in the condition, outside the optimizer's branch: in
        # GRAPH_MODE a Parameter that only a branch reads misses later writes from Python.
        within = ops.logical_and(stats <= self.upper_bounds, stats >= self.lower_bounds)
        apply = ops.all(within)
        if self.share:
            past = ops.cast(ops.logical_not(ops.reshape(apply, (1,))), ms.float32)
            # the host withholds by a loss bound below every value (``withholding``)
            held = ops.cast(self.upper_bounds[:1] < self.held_below, ms.float32)
            if self.rank_norms:
                # select, not a product with a one-hot vector: 0 * NaN is NaN, and this
                # rank's NaN would fill every other rank's slot
                mine = ops.select(self.rank_slot, ops.zeros_like(self.rank_zeros) + local_sq,
                                  self.rank_zeros)
                shared = self.all_reduce(ops.concat((mine, held, past)))
            else:
                shared = self.all_reduce(ops.concat((held, past)))
            apply = ops.reshape(shared[-1:], ()) < 0.5
            stats = ops.concat((stats, shared))
        return apply, stats

    # -- the host's side --------------------------------------------------------------
    def set_grad_explode(self, value: float) -> None:
        """The norm's own bound (``grad_explode``), for a cell built before the monitor's
        settings were known (MindFormers builds its train cell)."""
        self._norm_cap = bound(value)
        self._write_upper((self._upper[0], min(self._upper[1], self._norm_cap),
                           *self._upper[2:]))

    def set_limits(self, *, loss: float = math.inf, grad_norm: float = math.inf,
                   lr: float = math.inf) -> None:
        """The limits of the next step: withhold its update when the loss is above ``loss``,
        the norm above ``grad_norm`` (``grad_explode`` whatever this says) or any group's LR
        above ``lr``; ``inf`` is no limit, and non-finite values are past every limit. The
        Parameter is written only when a float32 bound changes (a host-to-device copy), in
        place: a graph that ``ms.jit`` compiled in PyNative mode keeps reading the tensor a
        Parameter had, and never sees a ``set_data``."""
        lrs = len(self._upper) - 2
        self._write_upper((bound(loss), min(bound(grad_norm), self._norm_cap))
                          + (bound(lr),) * lrs)

    def _write_upper(self, upper: tuple[float, ...]) -> None:
        if upper != self._upper:
            ops.assign(self.upper_bounds, ms.Tensor(np.array(upper, np.float32)))
            self._upper = upper

    def within_bounds(self, stats: list[float]) -> bool:
        """This rank's ``stats`` within the bounds the graph holds (float32 values against
        float32 bounds, so comparing them in float64 gives the float32 answer; NaN compares
        False), the ranks' shared verdict left aside."""
        own = stats[:self.stats_lr_end]
        return all(low <= value <= high
                   for value, low, high in zip(own, self._lower, self._upper, strict=True))

    def update_applied(self, stats: list[float]) -> bool:
        """The graph's decision, repeated on the host from the ``stats`` it returned."""
        if self.share:
            return stats[-1] < 0.5
        return self.within_bounds(stats)

    def held_by_a_host(self, stats: list[float]) -> bool:
        """Under data parallelism, whether some rank's host withheld this step on purpose
        (``withholding``), as the ranks' exchange counted them (one rank alone: its host
        knows what it did, reading/batch.py)."""
        return self.share and stats[-2] >= 0.5

    @contextlib.contextmanager
    def withholding(self) -> Iterator[None]:
        """Every update withheld while inside (every loss past its limit): a replay."""
        upper = self._upper
        self._write_upper((-FLOAT32_MAX, *upper[1:]))
        try:
            yield
        finally:
            self._write_upper(upper)


def current_lr(optimizer, group_lr: bool, indices: tuple[int, ...]):
    """In the graph: the LR the optimizer applies at this step, one entry per parameter group
    (``indices``: lr.py's ``group_indices``). Read before the update: afterwards
    ``global_step`` points at the next step."""
    lr = optimizer.get_lr()
    if group_lr:
        return ops.stack([ops.reshape(lr[i], ()) for i in indices])
    return ops.reshape(lr, ())


def stats_vector(loss, grad_norm, lr, group_lr: bool):
    """In the graph: the float32 ``stats`` vector (loss, norm, LRs) that StepVerdict judges."""
    loss = as_float32(ops.reshape(loss, ()))
    grad_norm = as_float32(ops.reshape(grad_norm, ()))
    if group_lr:
        return ops.concat((ops.stack((loss, grad_norm)), as_float32(lr)))
    return ops.stack((loss, grad_norm, as_float32(ops.reshape(lr, ()))))
