"""Hardware-fault benchmark under data parallelism: real msrun jobs of RANKS ranks on the
CPU, each training its own shard under TrainMonitor + wrap, a fault injected on rank 1 only:

    one_shot    rank 1's loss divided by zero once at FAULT_STEP, by a Cell that disarms
                itself inside the graph (a transient device fault): the update is withheld
                on every rank, every rank replays the step, and the replay is healthy
    bit_flip    one bit of one weight element of rank 1 flipped before FAULT_STEP (bit
                BIT of the float32, a ~1e-4 relative change): the replicas silently diverge
                until the next fingerprint comparison (consistency_interval CHECK_EVERY)

Printed per scenario and rank: what was found, at which step, how many steps after the
fault, and which rank it names. Nothing in a healthy run: the same job without a fault.

    python benchmarks/replica_faults.py
"""
from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import tempfile

RANKS, STEPS, FAULT_STEP, CHECK_EVERY, BIT = 3, 40, 25, 10, 10
SCENARIOS = ("healthy", "one_shot", "bit_flip")


def worker(log_dir: str, scenario: str) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import dataset as ds
    from mindspore import nn, ops
    from mindspore.communication import get_rank, init

    from faults import OneShotFault  # this folder: the one-shot Cell faults.py uses
    from mindwatch.mindspore import TrainMonitor

    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL,
                                 gradients_mean=True)
    rank = get_rank()
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(16, 64), nn.ReLU(), nn.Dense(64, 1))

    class Fault(ms.train.Callback):
        def on_train_step_begin(self, run_context):
            cb = run_context.original_args()
            if rank != 1 or cb.cur_step_num != FAULT_STEP:
                return
            if scenario == "one_shot":
                ops.assign(loss.fault_armed, ms.Tensor(1.0, ms.float32))
            elif scenario == "bit_flip":
                weight = cb.train_network.weights[0]
                bits = weight.asnumpy().copy().view(np.uint32)
                bits.flat[7] ^= np.uint32(1 << BIT)
                ops.assign(weight, ms.Tensor(bits.view(np.float32)))

    rng = np.random.default_rng(rank)
    x = rng.standard_normal((STEPS * 8, 16)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, 16, dtype=np.float32).reshape(16, 1)).astype(np.float32)
    loss = OneShotFault(nn.WithLossCell(net, nn.MSELoss()))
    monitor = TrainMonitor(log_dir, stream=io.StringIO(), hardware_interval_s=None,
                           on_anomaly="warn", consistency_interval=CHECK_EVERY)
    model = ms.train.Model(monitor.wrap(loss, nn.Adam(net.trainable_params(), 1e-3)))
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    model.train(1, data, callbacks=[Fault(), monitor], dataset_sink_mode=False)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(scenario: str, workdir: str):
    from mindwatch.runlog import read_run
    log_dir = os.path.join(workdir, scenario)
    environment = dict(os.environ)
    environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + environment["PATH"]
    for name in ("RANK_ID", "RANK_SIZE", "DEVICE_ID", "MS_WORKER_NUM", "MS_NODE_ID"):
        environment.pop(name, None)
    subprocess.run([sys.executable, "-m", "mindspore.parallel.cluster.run",
                    f"--worker_num={RANKS}", f"--local_worker_num={RANKS}",
                    f"--master_port={_free_port()}", f"--log_dir={log_dir}_msrun",
                    "--join=True", os.path.abspath(__file__), "worker", log_dir, scenario],
                   env=environment, check=True, capture_output=True, timeout=600)
    return read_run(log_dir)


def main() -> int:
    workdir = tempfile.mkdtemp(prefix="mindwatch-replicas-")
    print(f"{RANKS} ranks x {STEPS} steps, data parallel on the CPU, fault on rank 1 at step "
          f"{FAULT_STEP}; replicas compared every {CHECK_EVERY} steps")
    for scenario in SCENARIOS:
        found = run(scenario, workdir)
        for log in found.ranks:
            seen = [(a["step"], a["anomaly"], a.get("origin_rank")) for a in log.anomalies]
            text = ", ".join(f"{kind} at step {step} (+{step - FAULT_STEP})"
                             + ("" if origin is None else f" naming rank {origin}")
                             for step, kind, origin in seen) or "nothing"
            print(f"  {scenario:9s} rank {log.rank}: {text}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
