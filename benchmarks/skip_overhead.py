"""overhead.py with one more configuration: wrap under on_anomaly="skip", whose graph also
compares the loss and the gradient norm with the spike limits (two float32 Parameters).

    python benchmarks/skip_overhead.py --only wrap --chunks 6
"""
from __future__ import annotations

import sys

import overhead

overhead.CONFIGS.append(("TrainMonitor+wrap, on_anomaly skip",
                         overhead.mindwatch(settings=dict(on_anomaly="skip"))))

if __name__ == "__main__":
    sys.exit(overhead.main(sys.argv[1:]))
