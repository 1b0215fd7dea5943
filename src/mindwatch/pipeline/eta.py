"""``eta_s``: the time left to the run's last step, that one slow step does not swing.

The wall time between step ends is split in two:

- the steady pace: the mean time per step over the last ``WINDOW`` observations, leaving out
  the steps slower than ``EVENT_FACTOR`` times their median (a mean, so the ordinary jitter
  of steps is in it), and those faster by that factor (an older pace, once a slowdown has
  turned the median); the mean of the last ``CHANGE`` (or a third of a shorter history) when
  each of them is that far off the median, on one side (a run that slowed down is not
  promised its old pace);
- costs: what each of those slower steps took beyond the pace (a state step's extra graph,
  an evaluation between epochs, a checkpoint save, a compilation, a stall). Costs of about
  one size (within ``SAME_COST`` of each other) are one kind, and a kind recurs at the median
  of its intervals (those of at least ``MIN_PERIOD`` steps: costs in consecutive steps, a
  stall, recur at no period). Until a kind has recurred twice (two intervals: one is no
  period, two compilations of about one size would make one), it adds nothing: a
  compilation or a first call moves the ETA by no more than its own duration (by nothing).
  Then, while it still recurs (no more than ``LAPSE`` periods since the last), it comes
  every period from the last until the run's end, each time at its median cost (the first
  left out: a first call compiles).

- irregular costs: those of no kind that recurs now (a loaded host's hiccups, a cost that
  comes at no period). Their rate is the median, over the last ``BLOCKS`` blocks of
  ``BLOCK`` steps, of what each block spent on them: hiccups that come in most blocks are
  part of the pace; a one-off, in one block, moves no median.

``eta_s`` = steps left x (pace + irregular rate) + the expected costs. Nothing is made
up: unknown until two steps have ended (the segment's first step end starts the clock, so
its compilation is not in it), and absent without a known length. Measured in
``tests/mindspore/test_eta.py`` under ``Model.train``, ``Model.fit`` with evaluations and
the functional loop.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, field
from itertools import islice, pairwise
from statistics import median

WINDOW = 50            # observations of the steady pace
EVENT_FACTOR = 1.5     # a step slower than this times the median carries a cost
MIN_HISTORY = 10       # durations before any step is judged slow (the pace must be known)
CHANGE = 10            # the latest durations that, all off the median, are a new pace
SAME_COST = 2.0        # costs within this factor of a kind's median are that kind
LAPSE = 2.0            # periods without the cost after which a kind no longer recurs
MIN_PERIOD = 2         # steps: costs closer than this are a slow stretch, not a period
RECENT = 9             # the latest costs of a kind kept
MAX_KINDS = 16
BLOCK = 10             # steps a block of irregular costs spans
BLOCKS = 5             # the latest blocks whose median is the irregular rate (3 at least)


@dataclass
class _Kind:
    """Costs of about one size: the latest sizes (s) and the steps they came at."""
    costs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    steps: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT))
    count: int = 0

    def expected(self, step: int, left: int) -> float:
        """How many more times it comes in the ``left`` steps after ``step``."""
        # the median interval: an unrelated cost of the same size in between (a state
        # step's compilation beside the evaluations) does not halve it
        gaps = [b - a for a, b in pairwise(self.steps) if b - a >= MIN_PERIOD]
        # a period seen once is no period: two compilations of about one size are not
        if len(gaps) < 2:
            return 0.0
        period = median(gaps)
        if step - self.steps[-1] > LAPSE * period:
            return 0.0
        # at its phase: the next one a period after the last (overdue: the next step)
        due = max(self.steps[-1] + period, step + 1)
        return math.floor((step + left - due) / period) + 1 if due <= step + left else 0

    def cost(self) -> float:
        """The median cost; from the third on without the first (a first call compiles)."""
        costs = list(self.costs)
        return median(costs[1:] if self.count >= 3 and self.count <= RECENT else costs)

    def add(self, cost: float, step: int) -> None:
        self.costs.append(cost)
        self.steps.append(step)
        self.count += 1


class Eta:
    def __init__(self) -> None:
        self.total_steps: int | None = None
        self._durations: deque[float] = deque(maxlen=WINDOW)     # seconds per step
        self._last: tuple[int, float] | None = None               # (step, monotonic s)
        self._kinds: list[_Kind] = []
        # the costs of the last BLOCKS blocks: (step, seconds, their kind)
        self._costs: deque[tuple[int, float, _Kind]] = deque()
        self._first: int | None = None                            # the segment's first step

    def begin(self, total_steps: int | None) -> None:
        self.total_steps = total_steps
        self._reset()

    def _reset(self) -> None:
        self._durations.clear()
        self._last, self._kinds, self._first = None, [], None
        self._costs.clear()

    def update(self, step: int, now: float) -> float | None:
        """Seconds from ``now`` (monotonic) to the last step, after ``step`` ended now."""
        if self._last is not None and step <= self._last[0]:     # a new segment
            self._reset()
        if self._last is not None:
            steps = step - self._last[0]
            self._add((now - self._last[1]) / steps, steps, step)
        else:
            self._first = step
        self._last = (step, now)
        while self._costs and self._costs[0][0] <= step - BLOCK * BLOCKS:
            self._costs.popleft()
        if self.total_steps is None:
            return None
        if step >= self.total_steps:
            return 0.0
        if not self._durations:
            return None
        left = self.total_steps - step
        pace, changed = self._pace(sorted(self._durations))
        while changed and self._costs and self._costs[-1][0] > step - changed:
            self._costs.pop()                  # no costs: the new pace, before it was known
        expected = {id(kind): kind.expected(step, left) for kind in self._kinds}
        return left * (pace + self._irregular(step, expected)) \
            + sum(kind.cost() * expected[id(kind)] for kind in self._kinds)

    def _irregular(self, step: int, expected: dict[int, float]) -> float:
        """Seconds per step: the median over the latest blocks of the costs of kinds that
        do not recur now; 0 before 3 blocks of history."""
        blocks = min(BLOCKS, (step - (self._first or step)) // BLOCK)
        if blocks < 3:
            return 0.0
        spent = [0.0] * blocks
        for at, cost, kind in self._costs:
            block = (step - at) // BLOCK
            if block < blocks and not expected.get(id(kind)):
                spent[block] += cost
        return median(spent) / BLOCK

    def _pace(self, ordered: list[float]) -> tuple[float, int]:
        """The mean of the window's durations (``ordered``: sorted) within EVENT_FACTOR of
        their median; the mean of the latest CHANGE when all of them are off the median by
        that factor, on one side: the pace changed (a slowdown is no stall once it lasts),
        before the median turns. With how many of the latest steps made a new pace (0:
        none)."""
        if len(ordered) < MIN_HISTORY:
            return sum(ordered) / len(ordered), 0
        middle = ordered[len(ordered) // 2]
        # (a third of a short history: its median is no older pace than that)
        latest = list(islice(reversed(self._durations), min(CHANGE, len(ordered) // 3)))
        if all(d > EVENT_FACTOR * middle for d in latest) or \
                all(d * EVENT_FACTOR < middle for d in latest):
            return sum(latest) / len(latest), len(latest)
        # (steps faster by that factor are an older pace, once the median has turned)
        low, high = bisect_left(ordered, middle / EVENT_FACTOR), \
            bisect_right(ordered, EVENT_FACTOR * middle)
        return sum(ordered[low:high]) / (high - low), 0

    def _add(self, per_step: float, steps: int, step: int) -> None:
        ordered = sorted(self._durations)
        if len(ordered) >= MIN_HISTORY and per_step > EVENT_FACTOR * ordered[len(ordered) // 2]:
            cost = (per_step - self._pace(ordered)[0]) * steps
            if cost > 0:                  # none when the pace has changed to this one's
                self._file(cost, step)
        self._durations.append(per_step)

    def _file(self, cost: float, step: int) -> None:
        """A cost that came at ``step``, into the kind of its size (or a new kind)."""
        near = min(self._kinds, default=None,
                   key=lambda kind: abs(math.log(cost / median(kind.costs))))
        if near is None or abs(math.log(cost / median(near.costs))) > math.log(SAME_COST):
            if len(self._kinds) >= MAX_KINDS:       # the one not seen for longest goes
                self._kinds.remove(min(self._kinds, key=lambda kind: kind.steps[-1]))
            near = _Kind()
            self._kinds.append(near)
        near.add(cost, step)
        self._costs.append((step, cost, near))
