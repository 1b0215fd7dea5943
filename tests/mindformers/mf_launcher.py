"""What ``run_mindformer.py --config CONFIG`` does, on the CPU: ``MindFormerConfig``,
``set_output_path``, ``build_context``, ``Trainer(config).train()``, with a small random-token
dataset unless the config has a ``train_dataset`` of its own (test_launcher_matches.py checks
these calls against each release's launcher).

    python mf_launcher.py CONFIG
    python mf_launcher.py --serve REPLY_FD      (the tests' ``Launcher``: see ``serve``)
    python mf_launcher.py --batch PLAN_JSON     (several runs under one msrun job)

The test-only parts, which the CPU needs and a user's Ascend run does not: the
``hyper_parallel`` stand-in (see hyper_parallel_standin.py), ``CPUTrainOneStepCell``
(MFTrainOneStepCell's overflow check uses NPUGetFloatStatusV2, Ascend-only; this one looks
for non-finite gradients with IsFinite), and the callbacks the test YAMLs list to make
something happen (``NanAtStep``, ``StopAtStep``, ``SlowFromStep``, the conformance faults:
``FaultyLlamaForCausalLM``, ``JumpLR``, ``FaultAt``) or show what happened
(``StateDigest``, ``GlobalStepAtEnd``). mindwatch comes in through the YAML alone.

Under msrun (``use_parallel: True``) each rank trains on its own shard of the data, as
MindFormers' dataset builders shard it.
"""
import gc
import hashlib
import json
import os
import sys
import time
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hyper_parallel_standin

hyper_parallel_standin.install()

import mindspore as ms  # noqa: E402
import numpy as np  # noqa: E402
from mindformers import MindFormerConfig, Trainer  # noqa: E402
from mindformers.core.context import build_context  # noqa: E402
from mindformers.core.lr import LinearWithWarmUpLR  # noqa: E402
from mindformers.models.llama import LlamaForCausalLM  # noqa: E402
from mindformers.tools.register import MindFormerModuleType, MindFormerRegister  # noqa: E402
from mindformers.wrapper import MFTrainOneStepCell  # noqa: E402
from mindspore import dataset as ds  # noqa: E402
from mindspore import ops  # noqa: E402
from mindspore.communication import get_group_size, get_rank  # noqa: E402
from mindspore.train import Callback  # noqa: E402

try:                                       # run_mindformer.py's import, 1.6 to 1.9
    from mindformers.tools import set_output_path
except ImportError:                        # 2.0 keeps it in utils
    from mindformers.utils.file_utils import set_output_path

VOCAB, SEQ, BATCH, SAMPLES = 128, 32, 2, 40


@MindFormerRegister.register(MindFormerModuleType.WRAPPER)
class CPUTrainOneStepCell(MFTrainOneStepCell):
    """MFTrainOneStepCell with an overflow check that runs on the CPU: any non-finite
    gradient is an overflow (MindFormers then drops the update)."""

    def start_overflow_check(self, pre_cond, compute_input):
        return ms.Tensor(False), compute_input

    def get_overflow_status(self, status, compute_output):
        finite = ops.stack([ops.isfinite(grad).all() for grad in compute_output])
        return ops.logical_not(finite.all())


@MindFormerRegister.register(MindFormerModuleType.CALLBACK)
class NanAtStep(Callback):
    """NaN in the token embedding during step ``step`` only (a corrupted forward), on every
    rank or on ``rank`` alone."""

    def __init__(self, step, rank=None):
        self.step, self.saved = (step if rank in (None, _rank()) else None), None

    def _embedding(self, run_context):
        cell = run_context.original_args().train_network
        return next(p for p in cell.get_parameters() if "embedding" in p.name)

    def on_train_step_begin(self, run_context):
        if run_context.original_args().cur_step_num == self.step:
            weight = self._embedding(run_context)
            self.saved = weight.asnumpy().copy()
            ops.assign(weight, ms.Tensor(np.full_like(self.saved, np.nan)))

    def on_train_step_end(self, run_context):
        if self.saved is not None:
            ops.assign(self._embedding(run_context), ms.Tensor(self.saved))
            self.saved = None


@MindFormerRegister.register(MindFormerModuleType.CALLBACK)
class StopAtStep(Callback):
    """``request_stop()`` at the end of step ``step`` on rank ``rank`` only, as a user's early
    stopping callback listed before mindwatch would."""

    def __init__(self, step, rank):
        self.step, self.rank = step, rank

    def on_train_step_end(self, run_context):
        if _rank() == self.rank and run_context.original_args().cur_step_num == self.step:
            run_context.request_stop()


@MindFormerRegister.register(MindFormerModuleType.CALLBACK)
class SlowFromStep(Callback):
    """Every step waits ``base`` seconds at its end (a device's steady compute, which a loaded
    CI host's contention cannot triple), and ``seconds`` more from step ``step`` on (the
    device throttled): listed before mindwatch, inside the step as mindwatch times it."""

    def __init__(self, step, seconds, base=0.0):
        self.step, self.seconds, self.base = step, seconds, base

    def on_train_step_end(self, run_context):
        slow = run_context.original_args().cur_step_num >= self.step
        time.sleep(self.base + (self.seconds if slow else 0.0))


@MindFormerRegister.register(MindFormerModuleType.CALLBACK)
class GlobalStepAtEnd(Callback):
    """Prints the optimizer's step when training ends: updates actually applied."""

    def on_train_end(self, run_context):
        optimizer = run_context.original_args().train_network.optimizer
        print(f"optimizer global_step {int(optimizer.global_step.asnumpy()[0])}", flush=True)


@MindFormerRegister.register(MindFormerModuleType.CALLBACK)
class StateDigest(Callback):
    """Prints, after every step, a digest of the training state (the model's and the
    optimizer's Parameters: weights, moments, global_step) and the loss scale: a withheld
    step's digest is the step before's."""

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        cell, digest = cb.train_network, hashlib.sha256()
        state = {p.name: p for p in [*cell.network.get_parameters(),
                                     *cell.optimizer.get_parameters()]}
        for name in sorted(state):
            digest.update(name.encode())
            digest.update(state[name].asnumpy().tobytes())
        scale = float(cb.train_network.scale_sense.asnumpy().reshape(-1)[0])
        print(f"state step {cb.cur_step_num} {digest.hexdigest()} scale {scale}", flush=True)


class FaultyLoss(ms.nn.Cell):
    """MindFormers' loss Cell, times ``fault_scale`` plus ``fault_offset``: Parameters that
    ``FaultAt`` sets for one step (the conformance faults: a NaN or scaled loss, whose
    gradients are scaled alike, or +Inf added, whose gradients stay finite)."""

    def __init__(self, loss):
        super().__init__()
        self.inner = loss
        self.fault_scale = ms.Parameter(ms.Tensor(1.0, ms.float32), name="fault_scale",
                                        requires_grad=False)
        self.fault_offset = ms.Parameter(ms.Tensor(0.0, ms.float32), name="fault_offset",
                                         requires_grad=False)

    def construct(self, logits, label, input_mask):
        return self.inner(logits, label, input_mask) * self.fault_scale + self.fault_offset


@MindFormerRegister.register(MindFormerModuleType.MODELS)
class FaultyLlamaForCausalLM(LlamaForCausalLM):
    """The legacy Llama with FaultyLoss around its loss."""

    def __init__(self, config=None):
        super().__init__(config)
        self.loss = FaultyLoss(self.loss)


@MindFormerRegister.register(MindFormerModuleType.LR)
class JumpLR(LinearWithWarmUpLR):
    """LinearWithWarmUpLR whose LR is 1e5 times higher while ``global_step`` is
    ``jump_step - 1``, the optimizer's count during step ``jump_step`` (an LR blow-up)."""

    def __init__(self, jump_step, **kwargs):
        super().__init__(**kwargs)
        self.jump_at = ms.Tensor(jump_step - 1, ms.int32)

    def construct(self, global_step):
        lr = super().construct(global_step)
        return ops.select(global_step.astype(ms.int32).reshape(()) == self.jump_at,
                          lr * 1e5, lr)


FAULT_VALUES = {"none": (1.0, 0.0), "nan": (float("nan"), 0.0), "explode": (1e7, 0.0),
                "spike": (30.0, 0.0),
                "inf_loss": (1.0, float("inf"))}


@MindFormerRegister.register(MindFormerModuleType.CALLBACK)
class FaultAt(Callback):
    """Sets FaultyLoss's Parameters for step ``step`` only (``fault``: FAULT_VALUES), and
    saves the network's weights after step ``step - 1`` to ``good_weights`` (the last good
    state, which a stop's checkpoint must equal when the update was withheld)."""

    def __init__(self, step, fault, good_weights):
        self.step, self.fault, self.good_weights = step, fault, good_weights

    def _set(self, run_context, values):
        cell = run_context.original_args().train_network
        for parameter in cell.get_parameters():
            for suffix, value in zip(("fault_scale", "fault_offset"), values, strict=True):
                if parameter.name.endswith(suffix):
                    ops.assign(parameter, ms.Tensor(value, ms.float32))

    def on_train_step_begin(self, run_context):
        if run_context.original_args().cur_step_num == self.step:
            self._set(run_context, FAULT_VALUES[self.fault])

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_step_num == self.step:
            self._set(run_context, (1.0, 0.0))
        if cb.cur_step_num == self.step - 1:
            ms.save_checkpoint(cb.train_network.network, self.good_weights)


def _rank():
    return get_rank() if ms.communication.GlobalComm.INITED else 0


def random_tokens(config):
    """The tests' dataset: SAMPLES rows of SEQ + 1 random tokens, in batches of BATCH; under
    msrun each rank's shard, as MindFormers' dataset builders shard it."""
    tokens = np.random.default_rng(0).integers(3, VOCAB, size=(SAMPLES, SEQ + 1))
    shards = {"num_shards": get_group_size(), "shard_id": get_rank()} \
        if config.use_parallel else {}
    data = ds.NumpySlicesDataset({"input_ids": tokens.astype(np.int32)}, shuffle=False,
                                 **shards)
    return data.batch(BATCH, drop_remainder=True)


def main(config_path):
    config = MindFormerConfig(config_path)
    set_output_path(config.output_dir)
    build_context(config)
    callbacks = []
    if os.environ.get("MINDWATCH_TRAINER_LOG_DIR"):        # the Trainer(callbacks=[...]) way
        from mindwatch.mindformers import MindWatchMonitor
        callbacks.append(MindWatchMonitor(os.environ["MINDWATCH_TRAINER_LOG_DIR"],
                                          hardware_interval_s=None))
    # a config with its own train_dataset (a user's: docs/mindformers.md) is run as
    # run_mindformer.py runs it, the Trainer building the dataset from the YAML
    data = None if config.train_dataset else random_tokens(config)
    Trainer(args=config, train_dataset=data, callbacks=callbacks or None).train()
    print("training returned", flush=True)


# The sections of a config that MindFormers applies once a process: its Context (MindSpore's
# context and parallel context, communication, CPU affinity) is a singleton, built by the
# process's first build_context and kept (a second one fails: MindSpore sets the CPU
# affinity once). The runs that share a process (serve, batch) must agree on these; what
# else the singleton keeps of the first run's config (its seed, output_dir, load_checkpoint)
# the Trainer reads from each run's own config.
CONTEXT_KEYS = ("context", "parallel", "parallel_config", "use_parallel", "run_mode",
                "use_legacy", "micro_batch_interleave_num")


def context_of(config_path):
    """What of the config at ``config_path`` the process's MindFormers Context is built from."""
    import yaml
    with open(config_path) as f:
        config = yaml.safe_load(f)
    return {key: config.get(key) for key in CONTEXT_KEYS}


def run_as_its_own_process(config_path, cwd, env, out_path):
    """``main(config_path)`` as ``python mf_launcher.py CONFIG`` runs it in a process of its
    own, here after other runs of the same context (CONTEXT_KEYS): in ``cwd``, with ``env``
    added to the environment, its output (this process's stdout and stderr, MindSpore's C++
    logging included) into ``out_path``, Python's record of the warnings already shown
    forgotten; the environment and working directory put back after. Returns the exit
    status that process would have had: 0 returned, a SystemExit's code, 1 raised."""
    environ, workdir = dict(os.environ), os.getcwd()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [os.path.abspath(__file__), config_path]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out_path, "wb") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    try:
        with warnings.catch_warnings():   # entering it forgets the warnings already shown
            main(config_path)
        status = 0
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:                 # a process would die of it: exit status 1
        traceback.print_exc()
        status = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(workdir)
        gc.collect()                      # the run's network and graphs
    return status


def serve(reply_fd):
    """Runs, one after another, the configs asked for on stdin, one JSON line each
    (``config``, ``cwd``, ``env``, ``out``), each as run_as_its_own_process runs it; after
    each, one JSON line (``status``) to file descriptor ``reply_fd``. Ends at stdin's end.
    A config whose context is not the first run's is refused (status "context")."""
    first = None
    for line in sys.stdin:
        request = json.loads(line)
        context = context_of(request["config"])
        first = context if first is None else first
        status = "context" if context != first else run_as_its_own_process(
            request["config"], request["cwd"], request["env"], request["out"])
        os.write(reply_fd, (json.dumps({"status": status}) + "\n").encode())


def batch(plan_path):
    """Every run of the plan (a JSON list of ``config``, ``cwd``, ``env``, and ``out`` and
    ``status``, the files of its output and exit status, where ``{rank}`` stands for msrun's
    RANK_ID), one after another in this process; their configs of one context."""
    with open(plan_path) as f:
        plan = json.load(f)
    contexts = [context_of(request["config"]) for request in plan]
    assert all(context == contexts[0] for context in contexts), contexts
    rank = os.environ.get("RANK_ID", "0")       # msrun's, for each worker
    for request in plan:
        status = run_as_its_own_process(request["config"], request["cwd"], request["env"],
                                        request["out"].format(rank=rank))
        with open(request["status"].format(rank=rank), "w") as f:
            f.write(str(status))


if __name__ == "__main__":
    # MindSpore's gc.collect() before every compilation walks what the imports left
    # (~300k objects, 0.17 s each time): frozen, as tests/conftest.py does for the workers
    gc.freeze()
    # one CPU kernel thread, as tests/conftest.py sets for the test processes (its note)
    ms.device_context.cpu.op_tuning.threads_num(1)
    if sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    elif sys.argv[1] == "--batch":
        batch(sys.argv[2])
    else:
        main(sys.argv[1])
