"""The single place that decides what to do about each kind of anomaly."""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from .anomaly import (
    ANOMALY_KINDS,
    GRAD_SPIKE,
    GRADIENT_EXPLODE,
    GRADIENT_NONFINITE,
    GRADIENT_VANISH,
    HANG,
    LOSS_NONFINITE,
    LOSS_RISING,
    LOSS_SPIKE,
    LR_ANOMALY,
    OVERHEAT,
    PEER_STOP,
    REPLICA_MISMATCH,
    SIGNAL_STOP,
)

WARN = "warn"
STOP = "stop"
CHECKPOINT_AND_STOP = "checkpoint_and_stop"
# Withhold the step's update (in wrap's graph) and go on; see skipping.py.
SKIP = "skip"
# Restore the last healthy snapshot of the training state and go on; see rewinding.py.
REWIND = "rewind"

# Faults of the training state itself, which an older state does not have. Hardware and
# timing kinds (overheat, memory pressure, stragglers) would meet the restored state as they
# met the current one, so "rewind" is refused for them.
REWINDABLE_KINDS = (LOSS_NONFINITE, GRADIENT_NONFINITE, GRADIENT_EXPLODE, GRADIENT_VANISH,
                    LOSS_SPIKE, GRAD_SPIKE, LOSS_RISING, LR_ANOMALY)
# hang only: write the report and the end record, then exit with ABORT_EXIT_STATUS so the
# job launcher can restart the job (the training thread is stuck: nothing else can end it).
ABORT = "abort"
POLICIES = (WARN, STOP, CHECKPOINT_AND_STOP, SKIP, REWIND, ABORT)
# EX_TEMPFAIL (sysexits.h): "try again later", what a launcher's restart rule can match.
ABORT_EXIT_STATUS = 75
# A hang is found on the watchdog thread while the training thread is stuck mid-step: it
# can be reported, or end the process; a stop or a checkpoint would have to wait for the
# step that never ends (and race the optimizer if it did).
HANG_POLICIES = (WARN, ABORT)

# Kinds a user may give a policy for; peer_stop is the consequence of another rank's policy.
CONFIGURABLE_KINDS = tuple(kind for kind in ANOMALY_KINDS if kind != PEER_STOP)

DEFAULT_POLICIES: dict[str, str] = {kind: WARN for kind in CONFIGURABLE_KINDS}
DEFAULT_POLICIES.update({
    REPLICA_MISMATCH: CHECKPOINT_AND_STOP,      # ranks/replicas.py: the agreeing ranks' only
    LOSS_NONFINITE: CHECKPOINT_AND_STOP,
    GRADIENT_NONFINITE: CHECKPOINT_AND_STOP,
    GRADIENT_EXPLODE: CHECKPOINT_AND_STOP,
    # a non-finite or negative LR, or one far above the run's peak: one such update wrecks
    # the weights (detectors/lr_anomaly.py), and with wrap it is withheld on the step
    LR_ANOMALY: CHECKPOINT_AND_STOP,
    OVERHEAT: CHECKPOINT_AND_STOP,
})

# The actions of "skip" depend on what the graph did at the step: skipping.SkipGuard sets
# them before this table is consulted; "warn" is what remains when nothing was withheld.
_ACTIONS = {WARN: ["warn"], STOP: ["stop"], CHECKPOINT_AND_STOP: ["checkpoint", "stop"],
            SKIP: ["warn"], REWIND: ["rewind"], ABORT: ["abort"]}

PolicySpec = str | Mapping[str, str] | None


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """" (did you mean 'grad_explode'?)", to follow a mistyped ``name`` in an error message:
    the closest known name, so it is not lost in the list of all of them; "" when none is
    close (difflib's default cutoff, a 0.6 similarity ratio: a far guess would mislead)."""
    if not isinstance(name, str):
        return ""
    match = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _check_policy(policy: object, where: str, kind: str | None = None) -> str:
    """``kind`` None: one policy for every kind."""
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, POLICIES))}; got {policy!r}")
    if kind == HANG and policy not in HANG_POLICIES:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, HANG_POLICIES))} (a "
                         f"hang is found while the step is still stuck); got {policy!r}")
    if kind != HANG and policy == ABORT:
        raise ValueError(f"{where}: {ABORT!r} is valid for 'hang' only (on_anomaly="
                         "{'hang': 'abort'}); the other kinds take 'warn', 'stop', "
                         f"'checkpoint_and_stop', 'skip' or 'rewind'; got {policy!r}")
    if kind is not None and policy == REWIND and kind not in REWINDABLE_KINDS:
        raise ValueError(f"{where} cannot be 'rewind': an older training state does not cure "
                         f"{kind}; 'rewind' applies to {', '.join(REWINDABLE_KINDS)}")
    return policy


def resolve_policies(spec: PolicySpec) -> dict[str, str]:
    """The full kind -> policy table for ``on_anomaly`` (None, one policy, or a partial dict)."""
    if spec is None:
        return dict(DEFAULT_POLICIES)
    if isinstance(spec, str):
        policy = _check_policy(spec, "on_anomaly")
        if policy == REWIND:        # for every kind it applies to; the others keep defaults
            return {**DEFAULT_POLICIES, **{kind: REWIND for kind in REWINDABLE_KINDS}}
        # One policy for every kind: a hang takes it where it can (warn), else keeps its own.
        return {kind: policy if kind != HANG or policy in HANG_POLICIES
                else DEFAULT_POLICIES[kind] for kind in CONFIGURABLE_KINDS}
    if not isinstance(spec, Mapping):
        raise TypeError("on_anomaly must be a policy string or a dict of anomaly kind -> policy; "
                        f"got {type(spec).__name__}")
    table = dict(DEFAULT_POLICIES)
    for kind, policy in spec.items():
        if kind not in CONFIGURABLE_KINDS:
            raise ValueError(f"on_anomaly has unknown anomaly kind {kind!r}"
                             f"{did_you_mean(kind, CONFIGURABLE_KINDS)}; "
                             f"known kinds: {', '.join(CONFIGURABLE_KINDS)}")
        table[kind] = _check_policy(policy, f"on_anomaly[{kind!r}]", kind)
    return table


class Policy:
    """Maps an anomaly kind to the actions it triggers."""

    def __init__(self, table: Mapping[str, str], signal: str | None = CHECKPOINT_AND_STOP):
        """``table``: anomaly kind -> policy; ``signal``: the ``on_signal`` policy."""
        self._table = dict(table)
        self._signal = signal or STOP

    def policy_for(self, kind: str) -> str:
        return self._table.get(kind, WARN)

    def actions_for(self, kind: str) -> list[str]:
        if kind == PEER_STOP:
            return ["stop"]
        if kind == SIGNAL_STOP:
            return list(_ACTIONS[self._signal])
        return list(_ACTIONS[self._table.get(kind, WARN)])
