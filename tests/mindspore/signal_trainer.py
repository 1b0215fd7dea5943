"""The training script the signal tests run in a subprocess (not a test module itself).

    python signal_trainer.py LOG_DIR SCENARIO

SCENARIO: plain (a long run; a signal must end it cleanly) | chained (the user installed a
SIGTERM handler of their own before training) | slow (each step takes ~2 s, so a second
signal arrives mid-step).
"""
import os
import signal
import sys
import time

import mindspore as ms
from mindspore import nn
from mindspore.train import Callback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_dataset


class Sleep(Callback):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_step_end(self, run_context):
        time.sleep(self.seconds)


def main(log_dir, scenario):
    ms.set_context(mode=ms.GRAPH_MODE)
    if scenario == "chained":
        def users_handler(signum, frame):
            print(f"users handler got {signum}", flush=True)
        signal.signal(signal.SIGTERM, users_handler)
    net = make_regressor()
    monitor = TrainMonitor(log_dir, print_interval=1000, hardware_interval_s=None)
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    pause = Sleep(2.0 if scenario == "slow" else 0.01)
    ms.train.Model(step).train(1000, regression_dataset(n=64), callbacks=[pause, monitor],
                               dataset_sink_mode=False)
    print("training returned", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
