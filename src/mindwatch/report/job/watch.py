"""The live view of a job (``mindwatch watch`` of a run directory with ``job.jsonl``): its
latest step, the spread across ranks of step time, data time, local gradient norm and
memory with the rank and host of each extreme, and the last events, from the job log alone
(runlog/job/follow.py, folded by ``watch_state.JobState``): no row per rank, no rank log
opened, whatever the number of ranks.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ... import records
from ...basics import format as fmt
from ...basics.rank_set import rank_list_text
from ...job_schema import JobHang
from ...records import End, Run, Step
from ..summary import skipped_note
from ..watch_state import JobState
from .hangs import hung_ranks
from .summary import event_text, place_of

# The spreads of a job step the view shows, with how each value reads.
_SPREADS = (("step time", "step_time_s", fmt.duration), ("data time", "data_time_s", fmt.duration),
            ("local grad norm", "local_grad_norm", fmt.number),
            ("memory", "memory_mb", fmt.megabytes))


def _spread_row(name: str, spread: Mapping[str, Any], show: Callable[[Any], str],
                places: Mapping[int, tuple[str | None, int | None]]) -> list[str]:
    """One field's min (rank, host), median, max (rank, host) and non-finite ranks."""
    def at(value: Any, rank: Any) -> str:
        if value is None:
            return fmt.MISSING
        return show(value) + (f" on {place_of(rank, *places.get(rank, (None, None)))}"
                              if isinstance(rank, int) else "")
    bad = spread.get("nonfinite")
    return [name, at(spread.get("min"), spread.get("min_rank")), show(spread.get("median")),
            at(spread.get("max"), spread.get("max_rank")),
            f"ranks {bad}" if bad else ""]


def render_job(state: JobState, *, elapsed_s: float | None = None, final: bool = False):
    """The view of a job from its job log: its latest step, the spread of step time, data
    time, local gradient norm and memory across ranks (with the rank and host of each
    extreme), the last events; no row per rank."""
    step = state.step or {}
    total = (state.run or {}).get(Run.TOTAL_STEPS)
    head = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False,
                 collapse_padding=True)
    for name in ("step", "loss (mean)", "recent loss", "grad norm (max)", "withheld",
                 "status"):
        head.add_column(name, no_wrap=True, justify="left" if name in (
            "recent loss", "status") else "right")
    reason = (state.end or {}).get(End.REASON)
    status = Text("running", style="cyan") if state.end is None else \
        Text(str(reason), style="green" if reason == records.COMPLETED else "red")
    head.add_row(f"{step.get(Step.STEP, fmt.MISSING)}" + (f"/{total}" if total else ""),
                 fmt.number(step.get(Step.LOSS)), _sparkline(state.losses),
                 fmt.number(step.get(Step.GRAD_NORM)),
                 "yes" if step.get(Step.SKIPPED) else "no", status)
    parts: list[Any] = [head]
    spreads = Table(title=f"across ranks at step {step.get(Step.STEP, fmt.MISSING)}",
                    box=box.SIMPLE_HEAD, header_style="bold", title_justify="left",
                    pad_edge=False)
    for name in ("", "min", "median", "max", "not finite"):
        spreads.add_column(name, no_wrap=True, justify="right" if name == "median" else "left")
    for label, name, show in _SPREADS:
        spread = step.get(name)
        if isinstance(spread, Mapping):
            spreads.add_row(*_spread_row(label, spread, show, state.places))
    if spreads.row_count:
        parts.append(spreads)
    touched = step.get("ranks")
    if touched:
        many = "," in str(touched) or "-" in str(touched)
        parts.append(Text(f"anomalies at step {step.get(Step.STEP)} on rank"
                          f"{'s' if many else ''} {touched}", style="red"))
    hung = hung_ranks(state.hangs)
    if state.hangs:
        latest = state.hangs[-1]
        said = latest.get(JobHang.MESSAGE)     # the job's answer: whom, where, the others
        parts.append(Text(f"hung after step {latest.get(Step.STEP)}"
                          + (f": {said}" if said else
                             f", waiting for ranks {rank_list_text(hung)}" if hung else ""),
                          style="bold red"))
    if state.skipped[0]:
        parts.append(Text(f"job log: {skipped_note(*state.skipped)} (torn or not job-log "
                          "records)", style="yellow"))
    if state.events:
        recent = Table(title=f"last events ({state.event_count} in all)", box=box.SIMPLE_HEAD,
                       header_style="bold red", title_justify="left", pad_edge=False,
                       expand=True)
        recent.add_column("event")
        for event in state.events:
            recent.add_row(Text(event_text(event, state.world_size, state.places,
                                           state.segments)))
        parts.append(recent)
    hosts = len({host for host, _ in state.places.values()})
    where = (f"{state.run_dir}: job of {fmt.count(state.world_size, 'rank')} on "
             f"{fmt.count(hosts, 'host')} (job.jsonl)")
    if elapsed_s is not None:
        where += f", watching for {fmt.duration(elapsed_s)}"
    title = Text("mindwatch watch" + (" (final)" if final else "") + ": ", style="bold")
    return Group(title.append(where, style="none"), *parts)


def _sparkline(values: Any) -> str:
    from ..watch import sparkline

    return sparkline(values)
