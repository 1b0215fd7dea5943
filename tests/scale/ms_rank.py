"""What every scale-test rank under msrun does alike (not a test module): its step built by
``monitor.wrap`` over an MSE loss and Adam, trained for one epoch without sink mode, and the
process's start (ms_scale_trainer.py, ms_fault_trainer.py, ms_slow_trainer.py)."""
import gc
import sys

import mindspore as ms
from mindspore import nn


def train(monitor, net, data, callbacks=None):
    """``Model.train`` over ``monitor.wrap`` of ``net`` (``callbacks``: the monitor alone by
    default; the user's own ones and their order otherwise)."""
    step = monitor.wrap(nn.WithLossCell(net, nn.MSELoss()),
                        nn.Adam(net.trainable_params(), learning_rate=0.01))
    ms.train.Model(step).train(1, data, callbacks=callbacks or [monitor],
                               dataset_sink_mode=False)


def start(main, arguments):
    """``main(*sys.argv[1:1 + arguments])`` as a rank: the imports' objects out of
    MindSpore's gc.collect() at each compile, one CPU kernel thread (up to 16 ranks share the
    two cores: tests/conftest.py's note)."""
    gc.freeze()
    ms.device_context.cpu.op_tuning.threads_num(1)
    main(*sys.argv[1:1 + arguments])
