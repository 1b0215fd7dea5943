"""``mindwatch watch RUN_DIR``: a live terminal view that follows the run logs as they grow.

Three separable parts, so each can be tested without a terminal or a running job:

- ``Follower`` (``runlog.follower``) tails every ``rank_*.jsonl`` and returns only whole new
  records, skipping and counting bad lines; of a long log it returns the last MiB first and
  the older records later (``read_history``), between frames, so the first frame of any run
  comes at once;
- ``WatchState`` folds records into what the view shows (latest step, recent losses, latest
  hardware sample, last anomalies, whether each rank ended), the older records before the
  newer whatever the order they were read in;
- ``render(state)`` turns that into a rich renderable; ``watch`` loops over the three.

Numbers go through ``mindwatch.format``, so the console lines and this view read the same.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .. import records
from ..anomaly import HANG
from ..basics import format as fmt
from ..events import event_line
from ..records import (
    Activation,
    Anomaly,
    Common,
    Device,
    End,
    Hardware,
    LayerState,
    Run,
    State,
    Step,
    device_label,
)
from ..runlog import RunLogError
from ..runlog.follower import Follower
from ..runlog.job.follow import JobFollower
from ..settings import check_number
from .job.watch import render_job
from .summary import skipped_note
from .watch_state import LAST_ANOMALIES, SPARK_WIDTH, JobState, RankState, WatchState
from .watched import not_watched

_SPARKS = "▁▂▃▄▅▆▇█"
# The widest view measured for a file or a pipe, in columns: a bound for rich's measuring only;
# no real row comes near it (eight devices a rank take some 225).
_WIDEST = 100_000
EXIT_ENDED, EXIT_NOT_ENDED, EXIT_INTERRUPTED = 0, 1, 130

__all__ = ["Follower", "JobState", "NoRunLogs", "RankState", "WatchState", "render",
           "render_job", "sparkline", "watch"]


class NoRunLogs(RunLogError):
    """No ``rank_<R>.jsonl`` appeared in the run directory within ``wait_s``."""


def sparkline(values, width: int = SPARK_WIDTH) -> str:
    """Recent losses as block characters; a non-finite loss shows as '!'."""
    values = list(values)[-width:]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "".join("!" if v is not None else " " for v in values)
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif not math.isfinite(v):
            out.append("!")
        else:
            out.append(_SPARKS[round((v - low) / span * (len(_SPARKS) - 1))])
    return "".join(out)


def _devices(hardware: dict[str, Any] | None) -> str:
    devices = hardware.get(Hardware.DEVICES) if hardware else None
    if not devices or not isinstance(devices, list):
        return fmt.MISSING
    return "; ".join(f"{device_label(d)} {fmt.percent(d.get(Device.UTIL_PERCENT))}"
                     f" {fmt.celsius(d.get(Device.TEMP_C))} "
                     f"{fmt.megabytes(d.get(Device.MEM_USED_MB))}"
                     for d in devices if isinstance(d, Mapping))


def _status(state: RankState) -> Text:
    status = _ending(state)
    if state.fixes:             # never green: nothing was judged (report/watched.py)
        return Text(f"{status.plain}, not watched", style="red")
    return status


def _ending(state: RankState) -> Text:
    if state.end is not None:
        reason = state.end.get(End.REASON)
        return Text(str(reason), style="green" if reason == records.COMPLETED else "red")
    hang = state.last_anomaly
    if hang is not None and hang.get(Anomaly.ANOMALY) == HANG and (
            state.step is None or state.step.get(Step.STEP, 0) <= (hang.get(Anomaly.STEP) or 0)):
        # No step has ended since the watchdog reported: the rank is still stuck.
        return Text(f"hung >{fmt.duration(hang.get(Anomaly.VALUE))}", style="bold red")
    eta = (state.step or {}).get(Step.ETA_S)
    return Text("running" + ("" if eta is None else f", ETA {fmt.duration(eta)}"), style="cyan")


def largest(state: Mapping[str, Any], group: str, name: str) -> tuple[str, float] | None:
    """The layer (``group`` State.LAYERS) or watched sub-Cell (State.ACTIVATIONS) whose field
    ``name`` is the largest in a state record (NaN first: gone non-finite, it is the one to
    look at)."""
    found = None
    entries = state.get(group)
    for layer, fields in (entries if isinstance(entries, Mapping) else {}).items():
        value = fields.get(name) if isinstance(fields, Mapping) else None
        if not isinstance(value, (int, float)):
            continue
        key = (math.isnan(value), -math.inf if math.isnan(value) else value)
        if found is None or key > found[0]:
            found = (key, layer, float(value))
    return None if found is None else (found[1], found[2])


def _inside_the_model(ranks: Mapping[int, Any]) -> Table | None:
    """Per rank, the latest state record: norms, and the layer moving most for its size."""
    rows = [(rank, ranks[rank].state) for rank in sorted(ranks) if ranks[rank].state]
    if not rows:
        return None
    table = Table(title="inside the model (latest state record)", box=box.SIMPLE_HEAD,
                  header_style="bold", title_justify="left", pad_edge=False)
    logits = [largest(state, State.ACTIVATIONS, Activation.MAX_LOGIT) for _, state in rows]
    names = ["rank", "step", "weight norm", "update norm", "largest update/weight"]
    for name in names + (["largest attention logit"] if any(logits) else []):
        table.add_column(name, no_wrap=True, justify="left" if name.startswith("largest")
                         else "right")

    def named(top):
        return fmt.MISSING if top is None else f"{top[0]} {fmt.number(top[1])}"
    for (rank, state), logit in zip(rows, logits, strict=True):
        table.add_row(str(rank), str(state.get(State.STEP)),
                      fmt.number(state.get(State.WEIGHT_NORM)),
                      fmt.number(state.get(State.UPDATE_NORM)),
                      named(largest(state, State.LAYERS, LayerState.UPDATE_RATIO)),
                      *([named(logit)] if any(logits) else []))
    return table


def _throughput(step: Mapping[str, Any]) -> str:
    """Tokens/s and MFU when the run logs them (``tokens_per_sample``), else samples/s."""
    tokens = step.get(Step.TOKENS_PER_S)
    if tokens is None:
        return fmt.rate(step.get(Step.SAMPLES_PER_S))
    return fmt.token_rate(tokens, step.get(Step.MFU))


def _last_events(ranks: Mapping[int, RankState]) -> Table | None:
    """The last anomalies of every rank, one row per event (a step's anomalies on one rank,
    ``mindwatch.events``), the latest last; None when there was none."""
    events = sorted((e for rs in ranks.values() for e in list(rs.events)[-LAST_ANOMALIES:]),
                    key=lambda e: (e.records[0].get(Common.TIME) or 0, e.rank)
                    )[-LAST_ANOMALIES:]
    if not events:
        return None
    count = sum(rs.anomaly_count for rs in ranks.values())
    grouped = sum(rs.event_count for rs in ranks.values())
    events_note = "" if grouped == count else f", {fmt.count(grouped, 'event')}"
    recent = Table(title=f"last anomalies ({count} in all{events_note})",
                   box=box.SIMPLE_HEAD, header_style="bold red", title_justify="left",
                   pad_edge=False, expand=True)
    recent.add_column("rank", no_wrap=True)
    recent.add_column("event")
    for event in events:
        recent.add_row(str(event.rank), Text(event_line(event)))   # text, not markup
    return recent


def render(state: WatchState, *, elapsed_s: float | None = None, final: bool = False):
    """The whole view for the current state, as one rich renderable."""
    if not state.exists:
        return Panel(Text(f"waiting for {state.run_dir} to appear ...", style="yellow"),
                     title="mindwatch watch")
    ranks = state.ranks
    if not ranks:
        return Panel(Text(f"waiting for rank_*.jsonl run logs in {state.run_dir} ...",
                          style="yellow"), title="mindwatch watch")
    # Borderless columns: ten of them must fit in 120 terminal columns.
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False,
                  collapse_padding=True)
    for name in ("rank", "step", "loss", "smoothed", "recent loss", "lr", "grad norm",
                 "step time", "throughput", "status"):
        table.add_column(name, no_wrap=True, justify="left" if name in (
            "recent loss", "status") else "right")
    hardware = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for name in ("rank", "cpu", "host memory", "process RSS", "devices (util, temp, memory)"):
        hardware.add_column(name, justify="right" if name != "devices (util, temp, memory)"
                            else "left")
    for rank in sorted(ranks):
        rs = ranks[rank]
        step = rs.step or {}
        total = (rs.run or {}).get(Run.TOTAL_STEPS)
        table.add_row(
            str(rank), f"{step.get(Step.STEP, fmt.MISSING)}" + (f"/{total}" if total else ""),
            fmt.number(step.get(Step.LOSS)), fmt.number(step.get(Step.LOSS_SMOOTH)),
            sparkline(rs.losses), fmt.lr(step.get(Step.LR)),
            fmt.number(step.get(Step.GRAD_NORM)), fmt.duration(step.get(Step.STEP_TIME_S)),
            _throughput(step), _status(rs))
        if rs.hardware:
            hw = rs.hardware
            hardware.add_row(str(rank), fmt.percent(hw.get(Hardware.CPU_PERCENT)),
                             fmt.gigabytes(hw.get(Hardware.MEM_USED_GB)),
                             fmt.gigabytes(hw.get(Hardware.RSS_GB)), _devices(hw))
    parts: list[Any] = [table]
    unwatched = not_watched({rank: rs.fixes for rank, rs in ranks.items()}, len(ranks))
    if unwatched:
        parts.append(Text(unwatched, style="red"))
    if state.skipped:
        parts.append(Text("; ".join(f"rank {rank}: {skipped_note(count, at)}" for rank, (
            count, at) in sorted(state.skipped.items())) + " (torn or not run-log records)",
            style="yellow"))
    if hardware.row_count:
        parts.append(hardware)
    inside = _inside_the_model(ranks)
    if inside is not None:
        parts.append(inside)
    recent = _last_events(ranks)
    if recent is not None:
        parts.append(recent)
    ended = sum(1 for rs in ranks.values() if rs.end is not None)
    where = f"{state.run_dir}: {len(ranks)}/{fmt.count(state.world_size, 'rank')}, {ended} ended"
    if state.history_left:
        where += f", reading older records ({1 - state.history_left:.0%})"
    if elapsed_s is not None:
        where += f", watching for {fmt.duration(elapsed_s)}"
    title = Text("mindwatch watch" + (" (final)" if final else "") + ": ", style="bold")
    return Group(title.append(where, style="none"), *parts)


def watch(run_dir: str, *, console: Console | None = None, refresh_s: float = 0.5,
          clock: Callable[[], float] = time.monotonic, stop_when_ended: bool = True,
          timeout_s: float | None = None, sleep: Callable[[float], None] = time.sleep,
          wait_s: float | None = None) -> int:
    """Follow ``run_dir`` until every rank has ended (returns 0), ``timeout_s`` passes (1) or
    Ctrl-C (130). The last view stays on screen as the final table.

    ``wait_s``: raise RunLogError when no ``rank_<R>.jsonl`` is there within that many
    seconds (0: at once), instead of waiting for the run to start (None)."""
    check_number("refresh_s", refresh_s, low=0, low_open=True)
    fit_file = console is None        # a console given to us keeps the width it was given
    console = console or Console()
    follower, state = Follower(run_dir), WatchState(run_dir)
    # A job log, once there, is all the view reads: one file whatever the number of ranks.
    job_follower, job = JobFollower(run_dir), JobState(run_dir)
    start = clock()
    if wait_s is not None:
        _wait_for_logs(follower, job_follower, wait_s, refresh_s, clock, sleep)
    code = EXIT_NOT_ENDED

    def view(final: bool = False):
        if job.run is not None:
            return render_job(job, elapsed_s=clock() - start, final=final)
        return render(state, elapsed_s=clock() - start, final=final)

    # auto_refresh off: we redraw after each poll, so no second thread touches the state.
    with Live(render(state), console=console, auto_refresh=False, transient=False) as live:
        try:
            while True:
                if job.run is not None or job_follower.exists:
                    job.update(job_follower.poll())
                    job.skipped = job_follower.skipped
                if job.run is not None:
                    if stop_when_ended and job.end is not None:
                        code = EXIT_ENDED
                        break
                    if timeout_s is not None and clock() - start >= timeout_s:
                        break
                    live.update(view(), refresh=True)
                    sleep(refresh_s)
                    continue
                state.exists = follower.exists
                state.update(follower.poll())
                state.update_history(follower.read_history(0))     # the logs' first records
                state.skipped = follower.skipped
                state.history_left = follower.history_left
                if stop_when_ended and state.all_ended and not state.history_left:
                    code = EXIT_ENDED
                    break
                if timeout_s is not None and clock() - start >= timeout_s:
                    break
                live.update(render(state, elapsed_s=clock() - start), refresh=True)
                if state.history_left:      # instead of waiting: older records, till refresh
                    deadline = clock() + refresh_s
                    while follower.history_left and clock() < deadline:
                        state.update_history(follower.read_history())
                else:
                    sleep(refresh_s)
        except KeyboardInterrupt:
            code = EXIT_INTERRUPTED
        # Printed once by Live when it stops (on a terminal it stays; into a file it is the
        # only output): the final table.
        final = view(final=True)
        if fit_file:
            _fit_to_file(console, final)
        live.update(final, refresh=True)
    return code


def _fit_to_file(console: Console, view: Any) -> None:
    """Into a file or a pipe, make ``console`` as wide as ``view``'s widest row, so no row is
    cut: no terminal gives a width there, and rich's fallback (80 columns, or the width of a
    terminal on stdin or stderr) would truncate the rank rows and wrap the anomaly messages.
    A terminal keeps its width; so does a width asked for with ``COLUMNS``."""
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return
    console.width = Measurement.get(console, console.options.update_width(_WIDEST),
                                    view).maximum


def _wait_for_logs(follower: Follower, job: JobFollower, wait_s: float, refresh_s: float,
                   clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
    deadline = clock() + wait_s
    while not (follower.has_logs or job.exists):
        if clock() >= deadline:
            what = ("no rank_<R>.jsonl run logs" if follower.exists
                    else "no such run directory")
            waited = f" after waiting {wait_s:g} s" if wait_s else ""
            raise NoRunLogs(f"{follower.run_dir}: {what}{waited}")
        sleep(min(refresh_s, max(deadline - clock(), 0.0)))
