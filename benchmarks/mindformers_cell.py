"""Step time of MindWatchTrainOneStepCell against MindFormers' own train cell, side by side.

The legacy Llama of the MindFormers tests (tests/mindformers/mf_config.py), at 2 layers, trains
through the Trainer and YAML on the CPU, `MindWatchMonitor` in both runs' `callbacks:`, once
with MindFormers' cell (`CPUTrainOneStepCell`: `MFTrainOneStepCell` with the CPU overflow
check the tests give it) and once with mindwatch's, in turns (A B A B ...), each run in a
process of its own (MindFormers' cells slow down beside each other in one process). Per run
the median step time (mindwatch's `step_time_s`) over the steps after the first
``--warmup``; the ratio is the median over rounds of mindwatch's run / MindFormers' run of the
same round.

    python benchmarks/mindformers_cell.py [--rounds 3] [--epochs 10] [--warmup 20]

Needs MindFormers (the default `make test` venv has it).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / "mindformers"),
                str(Path(__file__).parents[1] / "tests")]

from mf_config import MF_CELL, MINDWATCH_CELL, mf_config, run_launcher  # noqa: E402

from mindwatch.runlog import read_rank_log  # noqa: E402

CELLS = {"MFTrainOneStepCell": MF_CELL, "MindWatchTrainOneStepCell": MINDWATCH_CELL}


def one_run(cell: dict, epochs: int, warmup: int) -> float:
    """Median step time (s) of one Trainer run with ``cell`` as runner_wrapper."""
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        config = mf_config(tmp, cell=cell, seed=1, layers=2, monitor={"print_interval": 1000})
        settings = yaml.safe_load(config.read_text())
        settings["runner_config"]["epochs"] = epochs
        config.write_text(yaml.safe_dump(settings))
        run_launcher(tmp, config)
        steps = read_rank_log(str(tmp / "mw" / "rank_0.jsonl")).steps[warmup:]
        return statistics.median(s["step_time_s"] for s in steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10, help="of 20 steps each")
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CELLS}
    for round_ in range(args.rounds):
        names = list(CELLS) if round_ % 2 == 0 else list(reversed(CELLS))
        for name in names:
            times[name].append(one_run(CELLS[name], args.epochs, args.warmup))
        print(f"round {round_ + 1}: " + ", ".join(
            f"{name} {times[name][-1] * 1e3:.2f} ms" for name in CELLS), flush=True)
    base, ours = times["MFTrainOneStepCell"], times["MindWatchTrainOneStepCell"]
    ratio = statistics.median(o / b for o, b in zip(ours, base, strict=True))
    print(f"\nmedian step time: MFTrainOneStepCell {statistics.median(base) * 1e3:.2f} ms, "
          f"MindWatchTrainOneStepCell {statistics.median(ours) * 1e3:.2f} ms")
    print(f"MindWatchTrainOneStepCell / MFTrainOneStepCell: {ratio:.3f}x (goal: <= 1.02x)")


if __name__ == "__main__":
    main()
