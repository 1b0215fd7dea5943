"""What a state step measures inside the graph: for every trained parameter, the squared L2
norms of its weight after the step, of the update the step applied, of its (pre-clip)
gradient, and of the optimizer's first and second moments where it keeps them.

A state step is a second compiled graph of the same train step (``MonitoredTrainStep`` runs
it every ``state_interval`` steps, the ordinary graph otherwise), so the ordinary steps pay
nothing, not even a branch. The update is the difference of the weights after and before the
optimizer call, so the state graph holds one transient copy of the weights on the device
during that step (never on the host); withheld, it is exactly zero.

The result is one float32 vector, one block of ``len(weights)`` entries per quantity in
``StateLayout.quantities`` order: one device-to-host copy per state step.
"""
from __future__ import annotations

from mindspore import nn, ops

from ...pipeline.layer_state import (
    FIRST_MOMENT,
    GRAD,
    SECOND_MOMENT,
    UPDATE,
    WEIGHT,
    StateLayout,
)
from ..compat import FIRST_MOMENT_PREFIXES, SECOND_MOMENT_PREFIXES


def moments_of(optimizer: nn.Optimizer, weights) -> tuple[tuple | None, tuple | None]:
    """The optimizer's first and second moment Parameters, one per weight in the weights'
    order, found by their names; None for a moment the optimizer does not keep."""
    by_name = {parameter.name: parameter for parameter in optimizer.get_parameters()}

    def find(prefixes):
        for prefix in prefixes:
            found = [by_name.get(f"{prefix}.{weight.name}") for weight in weights]
            if all(parameter is not None for parameter in found):
                return tuple(found)
        return None
    return find(FIRST_MOMENT_PREFIXES), find(SECOND_MOMENT_PREFIXES)


def layout_of(weights, first, second) -> StateLayout:
    quantities = (WEIGHT, UPDATE, GRAD) + ((FIRST_MOMENT,) if first is not None else ()) \
        + ((SECOND_MOMENT,) if second is not None else ())
    return StateLayout(tuple(weight.name for weight in weights), quantities)


_copy = ops.MultitypeFuncGraph("mindwatch_state_copy")


@_copy.register("Tensor")
def _copy_tensor(weight):
    # a new tensor holding the values before the optimizer writes the Parameter in place
    return weight * 1


def weights_before(hyper_map, weights):
    return hyper_map(_copy, weights)


def state_vector(square_sum, update_square_sum, hyper_map, weights, before, grad_sq, first,
                 second):
    """The state vector after the optimizer call: ``square_sum`` is the train step's
    float32 squared-sum kernel (a MultitypeFuncGraph), ``update_square_sum(after, before)``
    the update's, ``grad_sq`` the gradients' squared norms (stacked)."""
    blocks = [ops.stack(hyper_map(square_sum, weights)),
              ops.stack(hyper_map(update_square_sum, weights, before)),
              grad_sq]
    if first is not None:
        blocks.append(ops.stack(hyper_map(square_sum, first)))
    if second is not None:
        blocks.append(ops.stack(hyper_map(square_sum, second)))
    return ops.concat(blocks)
