"""The conformance matrix: what mindwatch does on every path MindSpore users train by.

One table (``OUTCOMES``) says, for each way the train step is built and each fault, what the
run must end with; ``cases()`` crosses it with the entry points (``Model.train``,
``Model.fit`` with a validation set, ``Model`` with ``metrics`` and an eval network, the
functional ``value_and_grad`` + ``ms.jit`` loop), both execution modes, sink mode and
MindSpore's own callbacks. ``markdown_table()`` renders the same table for
docs/pipelines.md, where a test keeps it identical.

Faults are injected at ``FAULT_STEP`` (the third step of epoch 2, after ``Model.fit``'s
first evaluation) through Parameters of the loss cell, the same way on every entry point:
a NaN label batch, a +Inf loss with finite gradients, labels scaled 1e7 (gradient
explosion), labels scaled 30 (a loss spike, its gradient norm below grad_explode), and a
per-step LR list that jumps from 1e-2 to 1e3.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

STEPS_PER_EPOCH = 12
EPOCHS = 2
FAULT_STEP = 15
FAULTS = ("healthy", "nan", "inf_loss", "explode", "lr_blowup", "spike")
ENTRIES = ("train", "fit", "metrics", "functional")
# How the train step is built: "wrap" (monitor.wrap with Model, monitor.jit_step in the
# functional loop), "plain" (Model(net, loss_fn, optimizer)), "loop" (the tutorial's own
# value_and_grad + ms.jit step, observed with monitor.observe).
BUILDS = ("wrap", "plain", "loop")
CALLBACKS = ("LossMonitor", "TimeMonitor", "ModelCheckpoint", "SummaryCollector",
             "EarlyStopping", "ReduceLROnPlateau")

# Settings every case trains with: spike rules warm up before the fault step.
SETTINGS = dict(print_interval=100, hardware_interval_s=None, spike_warmup=10, spike_window=10,
                grad_explode=1000.0)


@dataclass(frozen=True)
class Outcome:
    end: str                          # the end record's reason
    exit_code: int                    # `mindwatch summary`: 0 healthy, 1 anomalies
    first: str | None                 # an anomaly kind found at FAULT_STEP, the first step
    #                                   with any
    skipped: tuple[int, ...]          # steps whose update was withheld
    # "good": the stop's checkpoint equals the weights after the step before the fault;
    # "bad": it holds the fault step's update; None: no checkpoint written
    checkpoint: str | None
    advice: str | None                # a note every report of the run carries
    what: str                         # for people: what mindwatch does there


_STOPPED_GOOD = dict(end="stopped", exit_code=1, skipped=(FAULT_STEP,), checkpoint="good",
                     advice="holds the last good weights")
_STOPPED_BAD = dict(end="stopped", exit_code=1, skipped=(), checkpoint="bad",
                    advice="build it with monitor.wrap")
_STOPPED_UNSAVED = dict(end="stopped", exit_code=1, skipped=(), checkpoint=None,
                        advice="no checkpoint was written")
_HEALTHY = dict(end="completed", exit_code=0, first=None, skipped=(), checkpoint=None,
                advice=None, what="every step logged")
_WARNED = dict(end="completed", exit_code=1, skipped=(), checkpoint=None, advice=None)

OUTCOMES: dict[tuple[str, str], Outcome] = {
    ("wrap", "healthy"): Outcome(**_HEALTHY),
    ("wrap", "nan"): Outcome(first="loss_nonfinite", **_STOPPED_GOOD,
                             what="update withheld; stop; checkpoint of the last good weights"),
    ("wrap", "inf_loss"): Outcome(first="loss_nonfinite", **_STOPPED_GOOD,
                                  what="update withheld; stop; last good weights"),
    ("wrap", "explode"): Outcome(first="gradient_explode", **_STOPPED_GOOD,
                                 what="update withheld; stop; last good weights"),
    ("wrap", "lr_blowup"): Outcome(first="lr_anomaly", **_STOPPED_GOOD,
                                   what="update withheld; stop; last good weights"),
    ("wrap", "spike"): Outcome(first="loss_spike", **_WARNED,
                               what="warned (on_anomaly 'skip' withholds it)"),
    ("plain", "healthy"): Outcome(**_HEALTHY),
    ("plain", "nan"): Outcome(first="loss_nonfinite", **_STOPPED_BAD,
                              what="stop; the checkpoint holds the bad update, and says so"),
    ("plain", "inf_loss"): Outcome(first="loss_nonfinite", **_STOPPED_BAD,
                                   what="stop; checkpoint holds the update, says so"),
    ("plain", "explode"): Outcome(first="loss_spike", **_WARNED,
                                  what="no gradient norm: seen as a loss spike, warned"),
    ("plain", "lr_blowup"): Outcome(first="lr_anomaly", **_STOPPED_BAD,
                                    what="stop; checkpoint holds the update, says so"),
    ("plain", "spike"): Outcome(first="loss_spike", **_WARNED, what="warned"),
    ("loop", "healthy"): Outcome(**_HEALTHY),
    ("loop", "nan"): Outcome(first="loss_nonfinite", **_STOPPED_UNSAVED,
                             what="the loop stops; no weights known, no checkpoint"),
    ("loop", "inf_loss"): Outcome(first="loss_nonfinite", **_STOPPED_UNSAVED,
                                  what="the loop stops; no checkpoint"),
    ("loop", "explode"): Outcome(first="loss_spike", **_WARNED,
                                 what="no gradient norm: seen as a loss spike, warned"),
    ("loop", "lr_blowup"): Outcome(first="lr_anomaly", **_STOPPED_UNSAVED,
                                   what="the loop stops; no checkpoint"),
    ("loop", "spike"): Outcome(first="loss_spike", **_WARNED, what="warned"),
}
# on_anomaly "skip" for the spike: withheld in the graph, training goes on.
SKIP_SPIKE = Outcome(end="completed", exit_code=1, first="loss_spike", skipped=(FAULT_STEP,),
                     checkpoint=None, advice=None, what="withheld, training goes on")


@dataclass(frozen=True)
class Case:
    entry: str
    build: str
    fault: str
    mode: str = "GRAPH_MODE"
    sink: bool = False
    callback: str | None = None
    skip_spike: bool = False

    @property
    def id(self) -> str:
        parts = [self.entry, self.build, self.fault, "graph" if self.mode == "GRAPH_MODE"
                 else "pynative"]
        parts += ["sink"] * self.sink + [self.callback] * bool(self.callback)
        return "-".join(parts + ["skip"] * self.skip_spike)

    @property
    def outcome(self) -> Outcome:
        return SKIP_SPIKE if self.skip_spike else OUTCOMES[(self.build, self.fault)]


def _builds(entry: str) -> tuple[str, ...]:
    return ("wrap", "loop") if entry == "functional" else ("wrap", "plain")


def cases() -> list[Case]:
    """Every entry point x fault x build in GRAPH mode; the wrapped ones again in PYNATIVE
    (wrap's graph is where the modes differ); sink mode, which the CPU drops, on train and
    fit; each MindSpore callback beside the monitor under fit (and ModelCheckpoint without
    wrap too, where the last good state must come from its files); "skip" on a spike."""
    found = [Case(entry, build, fault)
             for entry, fault in itertools.product(ENTRIES, FAULTS) for build in _builds(entry)]
    found += [Case(entry, "wrap", fault, mode="PYNATIVE_MODE")
              for entry, fault in itertools.product(ENTRIES, FAULTS)]
    found += [Case(entry, build, "nan", sink=True)
              for entry in ("train", "fit") for build in ("wrap", "plain")]
    found += [Case("fit", "wrap", "nan" if callback in ("LossMonitor", "TimeMonitor",
                                                        "ModelCheckpoint") else "healthy",
                   callback=callback) for callback in CALLBACKS]
    found += [Case("train", "plain", "nan", callback="ModelCheckpoint")]
    found += [Case(entry, "wrap", "spike", skip_spike=True) for entry in ENTRIES]
    return found


def markdown_table() -> str:
    """The table of docs/pipelines.md: one row per fault, one column per build."""
    header = ("| fault (at one step) | `monitor.wrap` / `monitor.jit_step` | "
              "`Model(net, loss_fn, optimizer)` | own `value_and_grad` loop + `observe` |")
    rows = [header, "|---|---|---|---|"]
    for fault in FAULTS:
        cells = [_cell(OUTCOMES[(build, fault)]) for build in BUILDS]
        rows.append(f"| {FAULT_NAMES[fault]} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


FAULT_NAMES = {"healthy": "none", "nan": "NaN batch", "inf_loss": "+Inf loss, finite gradients",
               "explode": "gradient explosion", "lr_blowup": "LR blow-up (1e-2 to 1e3)",
               "spike": "loss spike"}


def _cell(outcome: Outcome) -> str:
    verdict = "HEALTHY, exit 0" if outcome.exit_code == 0 else "exit 1"
    kind = f"`{outcome.first}`: " if outcome.first else ""
    return f"{kind}{outcome.what} (`{outcome.end}`, {verdict})"
