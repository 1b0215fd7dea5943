"""Fault injection for ``mindwatch demo --inject KIND@STEP``.

Faults are provoked through three knobs that are Parameters, so a compiled GRAPH_MODE step
reads their current values each call: a factor on the loss (``explode``: huge gradients for
one step; ``spike``: a loss (and gradient) spike of one step, below grad_explode, that only
the spike rules catch; ``vanish``: gradients scaled towards zero from then on), an additive
poison on the loss (``nan``: a NaN batch for one step), and a factor on the LR schedule
(``diverge``: the LR grows geometrically from that step, which Adam's scale-invariance would
hide from a loss factor).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import mindspore as ms
from mindspore import nn
from mindspore.nn.learning_rate_schedule import LearningRateSchedule
from mindspore.train import Callback

KINDS = ("explode", "nan", "diverge", "vanish", "spike")
EXPLODE_FACTOR = 1e6
SPIKE_FACTOR = 20.0        # a bad batch: loss and gradients x20, far under grad_explode
VANISH_FACTOR = 1e-9
DIVERGE_GROWTH = 1.5       # LR multiplied by this every step from the fault on


@dataclass(frozen=True)
class Injection:
    kind: str
    step: int


def parse_inject(text: str) -> Injection:
    kind, sep, step = text.partition("@")
    if not sep or kind not in KINDS or not step.isdigit() or int(step) < 1:
        raise ValueError(f"--inject must be KIND@STEP with KIND one of {', '.join(KINDS)} and "
                         f"STEP a positive step number, e.g. explode@50; got {text!r}")
    return Injection(kind, int(step))


def _knob(name: str, value: float) -> ms.Parameter:
    return ms.Parameter(ms.Tensor(value, ms.float32), name=name, requires_grad=False)


class InjectableLoss(nn.Cell):
    def __init__(self, network: nn.Cell):
        super().__init__(auto_prefix=False)
        self.network = network
        self.fault_loss_factor = _knob("fault_loss_factor", 1.0)
        self.fault_loss_poison = _knob("fault_loss_poison", 0.0)

    def construct(self, *inputs):
        return self.network(*inputs) * self.fault_loss_factor + self.fault_loss_poison


class InjectableSchedule(LearningRateSchedule):
    def __init__(self, schedule: LearningRateSchedule):
        super().__init__()
        self.schedule = schedule
        self.fault_lr_factor = _knob("fault_lr_factor", 1.0)

    def construct(self, global_step):
        return self.schedule(global_step) * self.fault_lr_factor


class FaultInjector(Callback):
    """Sets the knobs before each step (``cur_step_num`` is the step about to run)."""

    def __init__(self, injection: Injection, loss: InjectableLoss, schedule: InjectableSchedule):
        self.injection, self.loss, self.schedule = injection, loss, schedule

    def on_train_step_begin(self, run_context) -> None:
        step = run_context.original_args().cur_step_num
        kind, at = self.injection.kind, self.injection.step
        factor, poison, lr_factor = 1.0, 0.0, 1.0
        if kind == "explode" and step == at:
            factor = EXPLODE_FACTOR
        elif kind == "spike" and step == at:
            factor = SPIKE_FACTOR
        elif kind == "nan" and step == at:
            poison = math.nan
        elif kind == "vanish" and step >= at:
            factor = VANISH_FACTOR
        elif kind == "diverge" and step >= at:
            lr_factor = DIVERGE_GROWTH ** (step - at + 1)
        self.loss.fault_loss_factor.set_data(ms.Tensor(factor, ms.float32))
        self.loss.fault_loss_poison.set_data(ms.Tensor(poison, ms.float32))
        self.schedule.fault_lr_factor.set_data(ms.Tensor(lr_factor, ms.float32))
