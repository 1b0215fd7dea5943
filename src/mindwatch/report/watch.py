"""``mindwatch watch RUN_DIR``: a live terminal view that follows the run logs as they grow.

Three separable parts, so each can be tested without a terminal or a running job:

- ``Follower`` tails every ``rank_*.jsonl`` by byte offset and returns only whole new records
  (a line without its newline yet is kept back until it is complete);
- ``WatchState`` folds records into what the view shows (latest step, recent losses, latest
  hardware sample, last anomalies, whether each rank ended);
- ``render(state)`` turns that into a rich renderable; ``watch`` loops over the three.

Numbers go through ``mindwatch.format``, so the console lines and this view read the same.
"""
from __future__ import annotations

import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .. import format as fmt
from .. import records
from ..records import Anomaly, Common, Device, End, Hardware, Run, Step, device_label
from ..run_dir import rank_logs, rank_of
from ..runlog import LineDecoder, RunLogError
from ..settings import check_number

_SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 16
LAST_ANOMALIES = 5
EXIT_ENDED, EXIT_NOT_ENDED, EXIT_INTERRUPTED = 0, 1, 130


class _Tail:
    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.inode: Optional[int] = None
        self.decoder = LineDecoder(path)   # keeps a line back until its newline is written


class Follower:
    """Returns the records appended to a run directory's rank logs since the last ``poll``."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self._tails: Dict[str, _Tail] = {}

    @property
    def exists(self) -> bool:
        return os.path.isdir(self.run_dir)

    def poll(self) -> List[Dict[str, Any]]:
        if not self.exists:
            return []
        for _, path in rank_logs(self.run_dir):
            if path not in self._tails:
                self._tails[path] = _Tail(path)
        found: List[Dict[str, Any]] = []
        for path in sorted(self._tails):
            found.extend(self._read(self._tails[path]))
        return found

    def _read(self, tail: _Tail) -> List[Dict[str, Any]]:
        try:
            with open(tail.path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                if stat.st_ino != tail.inode or stat.st_size < tail.offset:
                    # A new run without resume recreates the log: start it over.
                    if tail.inode is not None:
                        tail.offset, tail.decoder = 0, LineDecoder(tail.path)
                    tail.inode = stat.st_ino
                handle.seek(tail.offset)
                data = handle.read()
        except FileNotFoundError:     # removed between glob and open: it may come back
            return []
        except OSError as exc:
            raise RunLogError(f"cannot read {tail.path}: {exc.strerror or exc}") from exc
        tail.offset += len(data)
        found = tail.decoder.feed(data)
        for record in found:
            record.setdefault(Common.RANK, rank_of(tail.path))
        return found


@dataclass
class RankState:
    rank: int
    run: Optional[Dict[str, Any]] = None
    step: Optional[Dict[str, Any]] = None
    hardware: Optional[Dict[str, Any]] = None
    end: Optional[Dict[str, Any]] = None
    losses: Deque[Optional[float]] = field(default_factory=lambda: deque(maxlen=SPARK_WIDTH))
    anomalies: Deque[Dict[str, Any]] = field(default_factory=lambda: deque(maxlen=LAST_ANOMALIES))
    anomaly_count: int = 0


class WatchState:
    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.ranks: Dict[int, RankState] = {}
        self.exists = False

    def update(self, new: List[Dict[str, Any]]) -> None:
        for record in new:
            rank = record[Common.RANK]
            state = self.ranks.setdefault(rank, RankState(rank))
            kind = record.get(Common.KIND)
            if kind == records.RUN:
                state.run, state.end = record, None    # a new segment: running again
            elif kind == records.STEP:
                state.step = record
                state.losses.append(record.get(Step.LOSS))
            elif kind == records.HARDWARE:
                state.hardware = record
            elif kind == records.ANOMALY:
                state.anomalies.append(record)
                state.anomaly_count += 1
            elif kind == records.END:
                state.end = record

    @property
    def world_size(self) -> int:
        sizes = [s.run.get(Run.WORLD_SIZE) for s in self.ranks.values() if s.run]
        return max([len(self.ranks)] + [n for n in sizes if isinstance(n, int)])

    @property
    def all_ended(self) -> bool:
        """Every rank the run announced has logged an ``end`` record."""
        return bool(self.ranks) and len(self.ranks) >= self.world_size and all(
            s.end is not None for s in self.ranks.values())


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


def _devices(hardware: Optional[Dict[str, Any]]) -> str:
    if not hardware or not hardware.get(Hardware.DEVICES):
        return fmt.MISSING
    return "; ".join(f"{device_label(d)} {fmt.percent(d.get(Device.UTIL_PERCENT))}"
                     f" {fmt.celsius(d.get(Device.TEMP_C))} "
                     f"{fmt.megabytes(d.get(Device.MEM_USED_MB))}"
                     for d in hardware[Hardware.DEVICES])


def _status(state: RankState) -> Text:
    if state.end is not None:
        reason = state.end.get(End.REASON)
        return Text(str(reason), style="green" if reason == records.COMPLETED else "red")
    return Text("running", style="cyan")


def render(state: WatchState, *, elapsed_s: Optional[float] = None, final: bool = False):
    """The whole view for the current state, as one rich renderable."""
    if not state.exists:
        return Panel(Text(f"waiting for {state.run_dir} to appear ...", style="yellow"),
                     title="mindwatch watch")
    if not state.ranks:
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
    for rank in sorted(state.ranks):
        rs = state.ranks[rank]
        step = rs.step or {}
        total = (rs.run or {}).get(Run.TOTAL_STEPS)
        table.add_row(
            str(rank), f"{step.get(Step.STEP, fmt.MISSING)}" + (f"/{total}" if total else ""),
            fmt.number(step.get(Step.LOSS)), fmt.number(step.get(Step.LOSS_SMOOTH)),
            sparkline(rs.losses), fmt.lr(step.get(Step.LR)),
            fmt.number(step.get(Step.GRAD_NORM)), fmt.duration(step.get(Step.STEP_TIME_S)),
            fmt.rate(step.get(Step.SAMPLES_PER_S)), _status(rs))
        if rs.hardware:
            hw = rs.hardware
            hardware.add_row(str(rank), fmt.percent(hw.get(Hardware.CPU_PERCENT)),
                             fmt.gigabytes(hw.get(Hardware.MEM_USED_GB)),
                             fmt.gigabytes(hw.get(Hardware.RSS_GB)), _devices(hw))
    parts: List[Any] = [table]
    if hardware.row_count:
        parts.append(hardware)
    anomalies = sorted((a for rs in state.ranks.values() for a in rs.anomalies),
                       key=lambda a: (a.get(Common.TIME) or 0, a.get(Common.RANK))
                       )[-LAST_ANOMALIES:]
    count = sum(rs.anomaly_count for rs in state.ranks.values())
    if anomalies:
        recent = Table(title=f"last anomalies ({count} in all)", box=box.SIMPLE_HEAD,
                       header_style="bold red", title_justify="left", pad_edge=False,
                       expand=True)
        for name in ("step", "rank", "kind", "value", "actions", "message"):
            recent.add_column(name, no_wrap=name != "message")
        for a in anomalies:
            recent.add_row(str(a.get(Anomaly.STEP)), str(a.get(Common.RANK)),
                           str(a.get(Anomaly.ANOMALY)), fmt.number(a.get(Anomaly.VALUE)),
                           ", ".join(a.get(Anomaly.ACTIONS) or []), str(a.get(Anomaly.MESSAGE)))
        parts.append(recent)
    ended = sum(1 for rs in state.ranks.values() if rs.end is not None)
    where = f"{state.run_dir}: {len(state.ranks)}/{state.world_size} rank(s), {ended} ended"
    if elapsed_s is not None:
        where += f", watching for {fmt.duration(elapsed_s)}"
    title = Text("mindwatch watch" + (" (final)" if final else "") + ": ", style="bold")
    return Group(title.append(where, style="none"), *parts)


def watch(run_dir: str, *, console: Optional[Console] = None, refresh_s: float = 0.5,
          clock: Callable[[], float] = time.monotonic, stop_when_ended: bool = True,
          timeout_s: Optional[float] = None, sleep: Callable[[float], None] = time.sleep) -> int:
    """Follow ``run_dir`` until every rank has ended (returns 0), ``timeout_s`` passes (1) or
    Ctrl-C (130). The last view stays on screen as the final table."""
    check_number("refresh_s", refresh_s, low=0, low_open=True)
    console = console or Console()
    follower, state = Follower(run_dir), WatchState(run_dir)
    start = clock()
    code = EXIT_NOT_ENDED
    # auto_refresh off: we redraw after each poll, so no second thread touches the state.
    with Live(render(state), console=console, auto_refresh=False, transient=False) as live:
        try:
            while True:
                state.exists = follower.exists
                state.update(follower.poll())
                if stop_when_ended and state.all_ended:
                    code = EXIT_ENDED
                    break
                if timeout_s is not None and clock() - start >= timeout_s:
                    break
                live.update(render(state, elapsed_s=clock() - start), refresh=True)
                sleep(refresh_s)
        except KeyboardInterrupt:
            code = EXIT_INTERRUPTED
        # Printed once by Live when it stops (on a terminal it stays; into a file it is the
        # only output): the final table.
        live.update(render(state, elapsed_s=clock() - start, final=True), refresh=True)
    return code
