"""An msrun worker: MindFormers' pipeline cell, and mindwatch's, built as MindFormers' Trainer
builds them (``build_wrapper`` from the ``runner_wrapper`` entry, under semi-automatic
parallelism), then trained in stand-alone mode, with ``MindWatchMonitor`` beside the other.

    msrun ... pipeline_worker.py OUT SCENARIOS_JSON

The CPU compiles no semi-automatic parallel graph ("Invalid communication backend: CPU"), so
the cells are built in that mode, as on Ascend, and run in stand-alone mode with the parallel
optimizer's flag on: there MindFormers' construct uses the step's gradients as they are (its
other branch reads accumulation buffers that only the parallel compiler fills). Everything
else is MindFormers' construct as it stands: the loss scale, clipping, its overflow hooks,
its optimizer branch; and mindwatch's verdict, shared over the ranks by its AllReduce.

``CPUPipelineCell`` is MindFormers' cell with a CPU overflow check, as the Trainer tests'
launcher has one. Each scenario (``name``, ``cell``, ``fault``, ``fault_rank``, ``dynamic``,
``settings``, ``micro``: gradient accumulation steps, ``local_norm``, ``monitor``: also
beside MindFormers' cell) trains STEPS steps of a small
regressor, the fault at FAULT_STEP, and writes ``OUT/<name>/rank_<R>.json``: per step the
cell's loss, overflow, loss scale and global_norm outputs, the optimizer's global_step, and
a digest of the weights and moments.
"""
import gc
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hyper_parallel_standin

hyper_parallel_standin.install()

import mindspore as ms  # noqa: E402
import numpy as np  # noqa: E402
from mindformers.tools.register import MindFormerModuleType, MindFormerRegister  # noqa: E402
from mindformers.wrapper import MFPipelineWithLossScaleCell, build_wrapper  # noqa: E402
from mindspore import dataset as ds  # noqa: E402
from mindspore import nn, ops  # noqa: E402
from mindspore.communication import get_group_size, get_rank, init  # noqa: E402
from mindspore.nn.learning_rate_schedule import LearningRateSchedule  # noqa: E402
from mindspore.nn.wrap.cell_wrapper import GradAccumulationCell  # noqa: E402
from mindspore.train import Callback, Model  # noqa: E402

from mindwatch.mindformers import MindWatchMonitor  # noqa: E402

STEPS, FAULT_STEP, LR = 40, 36, 0.01


@MindFormerRegister.register(MindFormerModuleType.WRAPPER)
class CPUPipelineCell(MFPipelineWithLossScaleCell):
    """MindFormers' pipeline cell with an overflow check that runs on the CPU (its own uses
    NPUGetFloatStatusV2, Ascend-only): any non-finite gradient is an overflow."""

    def get_overflow_status(self, status, compute_output):
        finite = ops.stack([ops.isfinite(grad).all() for grad in compute_output])
        return ops.logical_not(finite.all())


class FaultyMSE(nn.Cell):
    """The regressor's MSE, plus +Inf where the batch's ``inf`` flag is set: a non-finite
    loss whose gradients are finite (the flag is no weight's)."""

    def __init__(self, net):
        super().__init__()
        self.net, self.mse = net, nn.MSELoss()

    def construct(self, x, y, inf):
        loss = self.mse(self.net(x), y)
        return loss + ops.select(inf.max() > 0, ops.fill(ms.float32, (), np.inf),
                                 ops.zeros((), ms.float32))


class JumpLR(LearningRateSchedule):
    """LR everywhere, 500 x LR at ``step`` (an LR schedule gone wrong) where ``jump``."""

    def __init__(self, jump):
        super().__init__()
        self.jump = jump

    def construct(self, global_step):
        if self.jump:
            at = ops.cast(ops.equal(global_step, FAULT_STEP - 1), ms.float32)
            return LR * (1.0 + 499.0 * at)
        return LR * ops.ones((), ms.float32)


def batches(fault, faulty, rank):
    rng = np.random.default_rng(7 + rank)
    w = np.array([[0.5], [-1.0], [2.0], [0.3]], np.float32)
    for step in range(1, STEPS + 1):
        x = rng.standard_normal((8, 4)).astype(np.float32)
        y = x @ w + 0.1
        inf = np.zeros(8, np.float32)            # per row: micro-batches slice it too
        if faulty and step == FAULT_STEP:
            if fault == "nan":
                x[0, 0] = np.nan
            elif fault == "inf_loss":
                inf = np.ones(8, np.float32)
            elif fault == "explode":
                x, y = x * 1e4, y * 1e4
            elif fault == "spike":
                y = y + 30.0
        yield x, y.astype(np.float32), inf


class Record(Callback):
    """Per step: the cell's outputs and a digest of the training state after it."""

    def __init__(self, cell, optimizer):
        self.cell, self.optimizer, self.steps = cell, optimizer, []

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        loss, overflow, scale, _, norm = (cb.net_outputs[i].asnumpy() for i in range(5))
        digest = hashlib.sha256()
        for p in self.optimizer.get_parameters():
            if p.name != "global_step":
                digest.update(p.asnumpy().tobytes())
        self.steps.append({"step": cb.cur_step_num, "loss": float(loss),
                           "overflow": bool(overflow), "scale": float(scale),
                           "global_norm": float(norm),
                           "global_step": int(self.optimizer.global_step.asnumpy().item()),
                           "digest": digest.hexdigest()})


def run(out, scenario, rank):
    ms.set_seed(1)
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=get_group_size(),
                                 enable_parallel_optimizer=True)
    net = FaultyMSE(nn.SequentialCell(nn.Dense(4, 16), nn.ReLU(), nn.Dense(16, 1)))
    # built after the network, as the Trainer builds it: the moments' names follow the
    # weights' (net.0.weight -> adam_m.net.0.weight)
    optimizer = nn.AdamWeightDecay(net.trainable_params(),
                                   JumpLR(scenario["fault"] == "lr"))
    scale = ({"type": "DynamicLossScaleUpdateCell", "loss_scale_value": 1024.0,
              "scale_factor": 2, "scale_window": 1000} if scenario["dynamic"] else 1.0)
    # gradient accumulation as the Trainer sets it up: MindSpore's GradAccumulationCell
    # around the network, micro_batch_num = gradient_accumulation_steps in the wrapper
    micro = scenario.get("micro", 1)
    network = net if micro == 1 else GradAccumulationCell(net, micro)
    wrapper = {"type": scenario["cell"], "scale_sense": scale, "use_clip_grad": True,
               "max_grad_norm": 1.0, "micro_batch_num": micro,
               "local_norm": scenario.get("local_norm", False)}
    cell = build_wrapper(wrapper, default_args={"network": network, "optimizer": optimizer})
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="stand_alone", enable_parallel_optimizer=True)
    fault_rank = scenario.get("fault_rank")
    faulty = fault_rank is None or fault_rank == rank
    data = ds.GeneratorDataset(list(batches(scenario["fault"], faulty, rank)),
                               ["x", "y", "inf"], shuffle=False)
    record = Record(cell, optimizer)
    callbacks = [record]
    where = os.path.join(out, scenario["name"])
    if scenario["cell"].startswith("MindWatch") or scenario.get("monitor"):
        callbacks.append(MindWatchMonitor(os.path.join(where, "mw"), hardware_interval_s=None,
                                          print_interval=100, **scenario.get("settings", {})))
    Model(cell).train(1, data, callbacks=callbacks, dataset_sink_mode=False)
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, f"rank_{rank}.json"), "w") as f:
        json.dump(record.steps, f)


def main(out, scenarios):
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    for scenario in json.loads(scenarios):
        run(out, scenario, get_rank())


if __name__ == "__main__":
    gc.freeze()            # the imports' objects, out of MindSpore's gc.collect() a compile
    # one CPU kernel thread, as tests/conftest.py sets for the test processes (its note)
    ms.device_context.cpu.op_tuning.threads_num(1)
    main(*sys.argv[1:])
