"""How large an update is against the weights it changes, judged before it is applied.

An LR typed a thousand times too large (``1e3`` for ``1e-3``, a schedule scaled twice, a
resumed run reading the wrong unit) wrecks the weights on its first update: Adam moves every
weight by about the LR at its first step, so at LR 1e3 weights of RMS 0.02 are 5e4 times
their size after one step. A rule that learns the run's LR first (``lr_jump_factor``) cannot
see that step; the weights themselves can. So every protected step also withholds an update
whose size, estimated from what the step already knows, is absurd against the weights' RMS
(``max_update_ratio``), and any LR above ``max_lr``.

The estimate of the update's RMS per element depends on how the optimizer scales it, told by
its class (``update_rule``):

- ``adaptive`` (Adam and its kin, RMSprop, Adagrad, Lion): each element moves by about the
  LR (Adam exactly so at its first step, where ``m / sqrt(v)`` is the gradient's sign;
  RMSprop's first step moves ~10x more, so its estimate is low, never a false alarm); the
  ratio is ``lr / rms(w)``, so the bound is an LR ceiling the host computes.
- ``gradient`` (SGD, Momentum): the update is ``lr * g``; the ratio is ``lr * |g| / |w|``
  with the gradient norm of the run's last applied step (a gradient that explodes now is
  ``gradient_explode``'s, not the LR's fault), an LR ceiling; before any step, the step's
  own norm: a ceiling on it for the first step's LR.
- ``relative`` (LAMB, LARS: trust ratios scale each layer's update to its weights; Adafactor
  and CAME, which scale it by the weights' RMS): the ratio is the LR itself.
- anything else (Adadelta, whose LR of 1.0 multiplies a tiny step; Rprop; L-BFGS): no estimate,
  no bound (``max_lr`` still holds).

The weights' norm comes from the protected step (PyTorch measures it in every step; MindSpore's
graph is handed a ceiling the host computes from a norm measured when training begins and on
state steps). Weights that are all zero (a head initialised at zero) have no scale to judge
against: no bound until they move. The estimate is an upper bound of the real ratio (Adam's
later steps move less than the LR), and the default bound leaves healthy runs a wide margin:
a healthy Transformer's updates are ~1e-3 of its weights per step.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ADAPTIVE, GRADIENT, RELATIVE = "adaptive", "gradient", "relative"
RULES = (ADAPTIVE, GRADIENT, RELATIVE)

# lower-case parts of optimizer class names (their MRO), per rule; the first rule that
# matches wins, so "lamb" (LAMB, an Adam with trust ratios) is tried before "adam". Adadelta
# matches none ("adadelta" holds no "adam" nor "adagrad")
_NAMES = ((RELATIVE, ("lamb", "lars", "adafactor", "came")),
          (ADAPTIVE, ("adam", "adagrad", "rmsprop", "lion")),
          (GRADIENT, ("sgd", "momentum")))
_SAID = {ADAPTIVE: "each weight moves by about the LR",
         GRADIENT: "the update is the LR times the gradient",
         RELATIVE: "the update is the LR times the weights"}


def update_rule(class_names: Sequence[str]) -> str | None:
    """The rule of an optimizer whose class and base classes are ``class_names`` (its MRO's
    ``__name__``s), or None when mindwatch knows no estimate for it."""
    lowered = [name.lower() for name in class_names]
    for rule, parts in _NAMES:
        if any(part in name for name in lowered for part in parts):
            return rule
    return None


def rule_of(optimizer: object) -> str | None:
    """``update_rule`` of an optimizer object."""
    return update_rule([cls.__name__ for cls in type(optimizer).__mro__])


@dataclass(frozen=True)
class WeightScale:
    """The trained weights' L2 ``norm`` over ``count`` elements, and the optimizer's rule."""

    norm: float
    count: int
    rule: str | None

    @property
    def rms(self) -> float:
        return self.norm / math.sqrt(self.count) if self.count > 0 else 0.0

    @property
    def judged(self) -> bool:
        """Whether updates can be judged against these weights (a rule, weights not zero)."""
        return self.rule is not None and math.isfinite(self.norm) and self.norm > 0

    def ratio(self, lr: float, grad_norm: float | None) -> float | None:
        """The estimated RMS of the update over the weights' RMS at ``lr`` (None: no
        estimate)."""
        if not self.judged or not math.isfinite(lr):
            return None
        if self.rule == ADAPTIVE:
            return lr / self.rms
        if self.rule == RELATIVE:
            return lr
        if grad_norm is None or not math.isfinite(grad_norm):
            return None
        return lr * grad_norm / self.norm

    def lr_ceiling(self, bound: float, grad_norm: float | None = None) -> float:
        """The LR above which an update's ratio exceeds ``bound``; ``grad_norm``: the
        gradient rule's norm (``inf`` when it is not known)."""
        if not self.judged:
            return math.inf
        if self.rule == ADAPTIVE:
            return bound * self.rms
        if self.rule == RELATIVE:
            return bound
        if grad_norm is None or not math.isfinite(grad_norm) or grad_norm <= 0:
            return math.inf
        return bound * self.norm / grad_norm

    def norm_ceiling(self, bound: float, lr: float | None) -> float:
        """The gradient norm above which an update at ``lr`` exceeds ``bound`` (the gradient
        rule; ``inf`` otherwise, and when the LR is not known or zero)."""
        if self.rule != GRADIENT or not self.judged or not lr or not math.isfinite(lr):
            return math.inf
        return bound * self.norm / lr

    def describe(self) -> str:
        return _SAID.get(self.rule or "", "")
