"""The conformance matrix's Trainer column: what a MindSpore Transformers Trainer/YAML run ends
with, for each fault, with MindFormers' own train cell and with mindwatch's
(``runner_wrapper: {type: MindWatchTrainOneStepCell}``). ``markdown_table()`` renders it for
docs/pipelines.md, where a test keeps it identical.

Faults are injected at ``FAULT_STEP`` by mf_launcher.py: the loss Cell's Parameters set for
that step (``FaultAt``: the loss times NaN, 1e7 or 30, or +Inf added, whose gradients stay
finite), or an LR schedule that jumps 1e5-fold at that step (``JumpLR``).
"""
from __future__ import annotations

from dataclasses import dataclass

FAULT_STEP = 15
FAULTS = ("healthy", "nan", "inf_loss", "explode", "lr_blowup", "spike")
CELLS = ("mindformers", "mindwatch")
# Settings of the MindWatchMonitor entry: spike rules warm up before the fault step; the
# healthy norm is ~1.4, an explosion 1e7 times that, a spike 30 times (under grad_explode).
SETTINGS = dict(print_interval=100, spike_warmup=10, spike_window=10, grad_explode=1000.0)


@dataclass(frozen=True)
class TrainerOutcome:
    end: str                         # the end record's reason
    exit_code: int                   # `mindwatch summary`
    first: str | None                # the anomaly kind found at FAULT_STEP
    skipped: tuple[int, ...]         # steps whose update was withheld
    checkpoint: str | None           # "good" (the weights after the step before), "bad", None
    what: str


_GOOD = dict(end="stopped", exit_code=1, skipped=(FAULT_STEP,), checkpoint="good")
_BAD = dict(end="stopped", exit_code=1, skipped=(), checkpoint="bad")
_HEALTHY = dict(end="completed", exit_code=0, first=None, skipped=(), checkpoint=None,
                what="every step logged, MFLossMonitor's numbers")
_WARNED = dict(end="completed", exit_code=1, skipped=(), checkpoint=None)

OUTCOMES: dict[tuple[str, str], TrainerOutcome] = {
    ("mindformers", "healthy"): TrainerOutcome(**_HEALTHY),
    ("mindformers", "nan"): TrainerOutcome(
        first="loss_nonfinite", **_GOOD,
        what="MindFormers' overflow check withholds it; stop; last good weights"),
    ("mindformers", "inf_loss"): TrainerOutcome(
        first="loss_nonfinite", **_BAD,
        what="stop; the checkpoint holds the bad update, and says so"),
    ("mindformers", "explode"): TrainerOutcome(
        first="gradient_explode", **_BAD, what="stop; checkpoint holds the update, says so"),
    ("mindformers", "lr_blowup"): TrainerOutcome(
        first="lr_anomaly", **_BAD, what="stop; checkpoint holds the update, says so"),
    ("mindformers", "spike"): TrainerOutcome(first="loss_spike", **_WARNED, what="warned"),
    ("mindwatch", "healthy"): TrainerOutcome(**_HEALTHY),
    ("mindwatch", "nan"): TrainerOutcome(
        first="loss_nonfinite", **_GOOD, what="update withheld; stop; last good weights"),
    ("mindwatch", "inf_loss"): TrainerOutcome(
        first="loss_nonfinite", **_GOOD, what="update withheld; stop; last good weights"),
    ("mindwatch", "explode"): TrainerOutcome(
        first="gradient_explode", **_GOOD, what="update withheld; stop; last good weights"),
    ("mindwatch", "lr_blowup"): TrainerOutcome(
        first="lr_anomaly", **_GOOD, what="update withheld; stop; last good weights"),
    ("mindwatch", "spike"): TrainerOutcome(
        first="loss_spike", **_WARNED, what="warned (on_anomaly 'skip' withholds it)"),
}
# on_anomaly {"loss_spike": "skip"}
SKIP_SPIKE = {
    "mindformers": TrainerOutcome(first="loss_spike", **_WARNED,
                                  what="warned: MindFormers' cell cannot withhold it"),
    "mindwatch": TrainerOutcome(end="completed", exit_code=1, first="loss_spike",
                                skipped=(FAULT_STEP,), checkpoint=None,
                                what="withheld, training goes on"),
}


@dataclass(frozen=True)
class TrainerCase:
    cell: str
    fault: str
    skip_spike: bool = False

    @property
    def id(self) -> str:
        return "-".join([self.cell, self.fault] + ["skip"] * self.skip_spike)

    @property
    def outcome(self) -> TrainerOutcome:
        return SKIP_SPIKE[self.cell] if self.skip_spike else OUTCOMES[(self.cell, self.fault)]


def cases() -> list[TrainerCase]:
    return [TrainerCase(cell, fault) for cell in CELLS for fault in FAULTS] + \
        [TrainerCase(cell, "spike", skip_spike=True) for cell in CELLS]


FAULT_NAMES = {"healthy": "none", "nan": "NaN loss", "inf_loss": "+Inf loss, finite gradients",
               "explode": "gradient explosion", "lr_blowup": "LR blow-up (x1e5)",
               "spike": "loss spike", "spike_skip": "loss spike, on_anomaly `skip`"}


def markdown_table() -> str:
    """The Trainer table of docs/pipelines.md: one row per fault, one column per cell."""
    rows = ["| fault (at one step) | MindFormers' `MFTrainOneStepCell` | "
            "`runner_wrapper: {type: MindWatchTrainOneStepCell}` |", "|---|---|---|"]
    for fault in FAULTS:
        cells = [_cell(OUTCOMES[(cell, fault)]) for cell in CELLS]
        rows.append(f"| {FAULT_NAMES[fault]} | " + " | ".join(cells) + " |")
    rows.append(f"| {FAULT_NAMES['spike_skip']} | "
                + " | ".join(_cell(SKIP_SPIKE[cell]) for cell in CELLS) + " |")
    return "\n".join(rows) + "\n"


def _cell(outcome: TrainerOutcome) -> str:
    verdict = "HEALTHY, exit 0" if outcome.exit_code == 0 else "exit 1"
    kind = f"`{outcome.first}`: " if outcome.first else ""
    return f"{kind}{outcome.what} (`{outcome.end}`, {verdict})"
