"""The training script the stop_exit_code tests run, alone or on every rank under msrun (not
a test module itself).

    python exit_trainer.py LOG_DIR SCENARIO [STOP_EXIT_CODE]

SCENARIO: nan (batch NAN_STEP's inputs are NaN: a loss_nonfinite stop) | nan_rank1 (under
msrun: rank 1's batch NAN_STEP only, so the reduced gradients are NaN on both ranks) |
early_stop (a callback before mindwatch asks to stop after step NAN_STEP, as EarlyStopping
does) | long (1000 steps of 10 ms: a signal ends it). STOP_EXIT_CODE: the setting, left out
for None. A callback after mindwatch prints when its ``on_train_end`` runs; "training
returned" is printed when ``model.train`` returns.
"""
import os
import sys
import time

import mindspore as ms
from mindspore import dataset as ds
from mindspore import nn
from mindspore.train import Callback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mindwatch.mindspore import TrainMonitor
from ms_helpers import make_regressor, regression_arrays

NAN_STEP, STEPS = 3, 8


class StopAt(Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == NAN_STEP:
            run_context.request_stop()


class Sleep(Callback):
    def on_train_step_end(self, run_context):
        time.sleep(0.01)


class EndsAfter(Callback):
    def on_train_end(self, run_context):
        print("the callback after mindwatch ended", flush=True)


def main(log_dir, scenario, code=None):
    ms.set_context(mode=ms.GRAPH_MODE)
    rank = 0
    if os.environ.get("MS_WORKER_NUM"):              # started by msrun
        from mindspore.communication import get_rank, init
        init()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                     gradients_mean=True)
        rank = get_rank()
    poisoned = scenario == "nan" or (scenario == "nan_rank1" and rank == 1)
    steps = 1000 if scenario == "long" else STEPS
    x, y = regression_arrays(8 * steps, seed=rank, nan_at=NAN_STEP if poisoned else None)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    settings = {} if code is None else {"stop_exit_code": int(code)}
    monitor = TrainMonitor(log_dir, hardware_interval_s=None, print_interval=100, **settings)
    net = make_regressor()
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params()))
    before = {"early_stop": [StopAt()], "long": [Sleep()]}.get(scenario, [])
    ms.train.Model(step).train(1, data, callbacks=[*before, monitor, EndsAfter()],
                               dataset_sink_mode=False)
    print("training returned", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
