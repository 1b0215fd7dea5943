"""Recovery benchmark: what each ``on_anomaly`` policy makes of the same faults.

The scenarios and models of faults.py (fault at step FAULT_STEP), each run once per policy,
on_anomaly set to that policy for every kind:

    warn                 the run goes on with the fault's update applied
    skip                 the update of an anomalous step is withheld in wrap's graph
    checkpoint_and_stop  the run stops at the first anomaly (checkpoint of the last good weights)
    rewind               the training state goes back to the last snapshot taken before the
                         fault (snapshot_every=SNAPSHOT_EVERY here) and training goes on

Per scenario and policy: the final loss (median of the last FINAL_STEPS steps the run
trained, as a multiple of the clean run's: a healthy run of the same seed and length) and the
steps lost (updates not applied: withheld, never run after a stop, or undone by a rewind). On
healthy runs a policy must do nothing: any anomaly there is a false alarm (FA). A fault a
policy cannot cure (one that lasts, such as a diverging LR) shows as "escalated" (skip or
rewind turned into checkpoint_and_stop after max_skips withheld updates or max_rewinds
rewinds) or as a final loss far above clean ("NOT FIXED").

    python benchmarks/recovery.py [--seeds 1] [--steps 200] [--arch tinygpt mlp]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile

import mindspore as ms

from faults import ARCHITECTURES, FAULT_STEP, run_one, scenarios

POLICIES = ("warn", "skip", "rewind", "checkpoint_and_stop")
SNAPSHOT_EVERY = 25
FINAL_STEPS = 10
NOT_FIXED = 1.5          # final loss above this multiple of clean's: the fault was not cured


def final_loss(steps) -> float:
    losses = [s["loss"] for s in steps if not s["skipped"] and s["loss"] is not None
              and math.isfinite(s["loss"])]
    return statistics.median(losses[-FINAL_STEPS:]) if losses else math.inf


def outcome(log, total_steps, clean_loss) -> dict:
    trained = sum(1 for s in log.steps if not s["skipped"])
    undone = sum(r["step"] - r["to_step"] for r in log.of_kind("rewind"))
    stopped = log.end is not None and log.end["reason"] == "stopped"
    escalated = any("escalated" in a["message"] for a in log.anomalies)
    return {"ratio": final_loss(log.steps) / clean_loss,
            "lost": total_steps - trained + undone, "rewinds": len(log.of_kind("rewind")),
            "stopped_at": log.steps[-1]["step"] if stopped else None, "escalated": escalated,
            "alarms": len(log.anomalies)}


def cell(results: list[dict], scenario: str) -> str:
    healthy = scenario == "healthy"
    ratio = statistics.median(r["ratio"] for r in results)
    lost = statistics.median(r["lost"] for r in results)
    text = f"x{ratio:.3g} lost {lost:g}"
    rewinds = max(r["rewinds"] for r in results)
    if rewinds:
        text += f" rw {rewinds}"
    if healthy:
        return text + f" FA {sum(r['alarms'] for r in results)}"
    if any(r["escalated"] for r in results):
        text += " ESCALATED"
    elif any(r["stopped_at"] for r in results):
        text += " stop"
    if ratio > NOT_FIXED and not any(r["stopped_at"] for r in results):
        text += " NOT FIXED"
    if scenario == "vanishing":     # the logged loss itself is scaled by 1e-9: no verdict
        text += " (loss x1e-9)"
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--arch", nargs="+", default=list(ARCHITECTURES),
                        choices=list(ARCHITECTURES))
    args = parser.parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    workdir = tempfile.mkdtemp(prefix="mindwatch-recovery-")
    print(f"{args.seeds} seed(s) x {args.steps} steps, fault at step {FAULT_STEP}; final loss "
          f"as a multiple of a clean run's, steps lost (updates not applied), FA = alarms on "
          f"a healthy run; rw N = rewinds; ESCALATED = skip or rewind gave up "
          f"(checkpoint_and_stop after max_skips or max_rewinds); "
          f"NOT FIXED = final loss > {NOT_FIXED}x clean")
    print(f"{'model':8s} {'scenario':16s}" + "".join(f"{p:>30s}" for p in POLICIES))
    for arch in args.arch:
        clean = [final_loss(run_one(arch, "healthy", seed, args.steps, workdir).steps)
                 for seed in range(args.seeds)]
        for scenario in scenarios(arch):
            row = f"{arch:8s} {scenario:16s}"
            for policy in POLICIES:
                results = []
                for seed in range(args.seeds):
                    extra = {"snapshot_every": SNAPSHOT_EVERY} if policy == "rewind" else {}
                    log = run_one(arch, scenario, seed, args.steps, workdir, policy=policy,
                                  **extra)
                    results.append(outcome(log, args.steps, clean[seed]))
                    print(f"  {arch} {scenario} {policy} seed {seed}: {results[-1]}",
                          file=sys.stderr)
                row += f"{cell(results, scenario):>30s}"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
