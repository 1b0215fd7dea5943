"""The training script the hang tests run in a subprocess (not a test module itself).

    python hang_trainer.py LOG_DIR

Its data source blocks for good at batch STALL_BATCH (1-based); on_anomaly {"hang": "abort"}
with hang_timeout_s HANG_TIMEOUT_S must end the process with status 75 and a complete log.
"""
import os
import sys
import time

import mindspore as ms
from mindspore import dataset as ds
from mindspore import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_arrays

STALL_BATCH = 5
HANG_TIMEOUT_S = 2.0


def a_mount_that_never_answers():
    time.sleep(3600)


def main(log_dir):
    ms.set_context(mode=ms.GRAPH_MODE)
    x, y = regression_arrays(64)

    class Batches:
        """A sized source: MindSpore would iterate a bare generator once to count it."""

        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i + 1 == STALL_BATCH:
                a_mount_that_never_answers()
            return x[8 * i: 8 * i + 8], y[8 * i: 8 * i + 8]

    net = make_regressor()
    monitor = TrainMonitor(log_dir, print_interval=1000, hardware_interval_s=0.2,
                           hang_timeout_s=HANG_TIMEOUT_S, on_anomaly={"hang": "abort"})
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    ms.train.Model(step).train(1, ds.GeneratorDataset(Batches(), ["x", "y"], shuffle=False),
                               callbacks=[monitor], dataset_sink_mode=False)
    print("training returned", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
