"""The fault benchmark's fleet rows (issue #44): a rank slow in its compute or in its input,
and healthy runs, at fleet sizes, every rank's straggler rule simulated in one process.

Each simulated rank runs the real rule (detectors/straggler.py with slow_cause.py, as
ranks/peers.py builds it at the default settings): it ``share``s its own window's medians,
the ranks' exchange is their sum (built here as arrays, what the all-reduce returns), and
each rank judges itself from it. The per-step figures each rank measures follow one of two
noise models:

- ``host``, fitted to real msrun jobs on the 2-core host (8 ranks, ``work_time_s`` = CPU
  seconds a step; docs/scale.md#slow-ranks-by-cause): own work 10 ms x a per-rank level (sd
  3%) x a slow drift (log AR(1), rho 0.9, sd 5%: a rank's CPU time wanders for tens of steps
  on a shared host) x per-step noise (sd 8%), 1% of steps 3x (a GC pause). Its healthy
  ranks' 20-step medians reach 1.07-1.12x the others' at 8 ranks, as the real jobs' did
  (1.08-1.13x);
- ``device``, dedicated accelerators (an assumption, not measured here: a kernel's time on a
  GPU or NPU varies ~1% from step to step, and identical cards differ by a few percent):
  level sd 2%, drift sd 1.5%, per-step sd 3%, the same 1% of 3x steps.

Data time in both: 0.3 ms + an exponential of mean 0.2 ms, 1% of steps +20 ms.

Scenarios: ``healthy``; ``compute`` (one rank's work x1.2 from a typical level: "a rank 20%
slower" than the others' median); ``input``
(one rank's batches 30 ms late, its data time +30 ms on a 50 ms step). The fault is there from
the first step (a slow card) or starts at ``ONSET`` (a card that throttles in the run).
Detection latency: steps from the warm-up's end (or the onset, if later) to the slow rank's
first straggler anomaly with the right cause; false alarms: every other straggler anomaly
(another rank, or the slow rank with another cause), over all runs.

    python benchmarks/slow_ranks.py [--ranks 8 16 4096] [--seeds 3] [--steps 120]

Past 64 ranks one seed a row (a 4096-rank run takes ~40 s here, every rank's rule judged).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from mindwatch.detectors.slow_cause import COMPUTE, DATA
from mindwatch.detectors.straggler import StragglerDetector
from mindwatch.settings import MonitorSettings

SETTINGS = MonitorSettings()
WINDOW, FACTOR = SETTINGS.straggler_window, SETTINGS.straggler_factor
WORK_FACTOR, WARMUP = SETTINGS.straggler_work_factor, SETTINGS.trend_warmup
STEP_S = 0.05                       # every rank's step (they end at the same collective)
WORK_S, SLOWER = 0.010, 1.2         # a rank's own work per step; the compute fault's factor
LATE_S = 0.030                      # the input fault: each batch this much late
ONSET = 80                          # the late fault's first step
SCENARIOS = ("healthy", "compute", "input")
CAUSE = {"compute": COMPUTE, "input": DATA}
# the noise models: (level, drift, per-step) standard deviations, fractions of the work
NOISES = {"host": (0.03, 0.05, 0.08), "device": (0.02, 0.015, 0.03)}


class Noise:
    """Every rank's measured figures, step after step (the models of the module's doc)."""

    def __init__(self, n: int, rng: np.random.Generator, model: str = "host"):
        self.n, self.rng = n, rng
        level, self.drift_sd, self.step_sd = NOISES[model]
        self.level = 1 + rng.normal(0, level, n)
        self.drift = rng.normal(0, self.drift_sd, n)

    def step(self) -> tuple[np.ndarray, np.ndarray]:
        rng, n = self.rng, self.n
        rho = 0.9
        self.drift = rho * self.drift + rng.normal(0, self.drift_sd * (1 - rho ** 2) ** 0.5, n)
        work = WORK_S * self.level * np.exp(self.drift) * (1 + rng.normal(0, self.step_sd, n))
        work = np.where(rng.random(n) < 0.01, 3 * work, work)
        data = 0.0003 + rng.exponential(0.0002, n) + np.where(rng.random(n) < 0.01, 0.02, 0.0)
        return np.maximum(work, 0.0), data


def simulate(n: int, scenario: str, seed: int, steps: int, onset: int, slow: int = 1,
             noise_model: str = "host") -> tuple[int | None, int, float]:
    """One run: (the slow rank's latency in steps, None when never named; false alarms;
    seconds per simulated step)."""
    rng = np.random.default_rng(seed)
    noise = Noise(n, rng, noise_model)
    noise.level[slow] = 1.0         # a typical card, 20% slower than the others by its fault
    rules = [StragglerDetector(rank=r, world_size=n, window=WINDOW, factor=FACTOR,
                               work_factor=WORK_FACTOR, warmup=WARMUP) for r in range(n)]
    first, false = None, 0
    started = time.perf_counter()
    for step in range(1, steps + 1):
        work, data = noise.step()
        if step >= onset and scenario == "compute":
            work[slow] *= SLOWER
        if step >= onset and scenario == "input":
            data[slow] += LATE_S
        # what the exchange returns: every rank's shared middles and medians
        middles = np.zeros((2, n), np.float32)
        medians = np.zeros((2, n), np.float32)
        codes = np.zeros(n, np.int64)
        for rank, rule in enumerate(rules):
            middles[:, rank] = rule.share(float(data[rank]))
            medians[:, rank] = rule.cause.share(float(work[rank]), None)
            codes[rank] = rule.slow_code
        for rank, rule in enumerate(rules):
            for anomaly in rule.update_peers(step, [], STEP_S, middles,
                                             (medians[0], medians[1]), codes):
                right = rank == slow and anomaly.fields.get("cause") == CAUSE.get(scenario)
                if right and first is None:
                    first = step
                elif not right:
                    false += 1
    per_step = (time.perf_counter() - started) / steps
    start = max(WARMUP, onset - 1) if scenario == "compute" else max(onset - 1, 0)
    return None if first is None else first - start, false, per_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[8, 16, 4096])
    parser.add_argument("--noise", nargs="*", default=list(NOISES), choices=list(NOISES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args(argv)
    print(f"slow ranks by cause (straggler_window {WINDOW}, straggler_factor {FACTOR}, "
          f"straggler_work_factor {WORK_FACTOR}, trend_warmup {WARMUP}); {args.seeds} seeds x "
          f"{args.steps} steps; latency: steps after the warm-up (or the onset) until the slow "
          "rank is named with its cause; FA: every other straggler anomaly")
    print(f"{'noise':6} {'ranks':>6} {'scenario':9} {'onset':>6} {'named':>6} "
          f"{'latency (median, max)':>22} {'FA':>4} {'s/step':>7}")
    for model in args.noise:
        for n in args.ranks:
            _rows(model, n, args.seeds if n <= 64 else 1, args.steps)
    return 0


def _rows(model: str, n: int, seeds: int, steps: int) -> None:
    for scenario in SCENARIOS:
        for onset in ((1,) if scenario == "healthy" else (1, ONSET)):
            found, false, cost = [], 0, []
            for seed in range(seeds):
                latency, alarms, per_step = simulate(n, scenario, seed, steps, onset,
                                                     noise_model=model)
                false += alarms
                cost.append(per_step)
                if latency is not None:
                    found.append(latency)
            named = "-" if scenario == "healthy" else f"{len(found)}/{seeds}"
            text = "-" if not found else f"{statistics.median(found):g}, {max(found)}"
            print(f"{model:6} {n:>6} {scenario:9} {onset:>6} {named:>6} {text:>22} {false:>4} "
                  f"{statistics.median(cost):>7.3f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
