"""Issue #44 under PyTorch: real torchrun jobs (DDP over gloo) in which one rank holds the
others (ddp_fault_trainer.py): 8 ranks on this host with rank 2 stuck in its DataLoader, and
two nodes of 2 ranks (two_nodes.py) with node-b's rank 3 stuck in its own code. Every rank
aborts on the hang; rank 0's job log and ``mindwatch summary`` name the rank the job waits
for, where it is, and where the others wait. Measured on the 2-core host: 13-20 s a job."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from launchers import launch
from two_nodes import INTERFACE, two_nodes

from mindwatch.basics.rank_set import parse_rank_set
from msrun_env import free_port

pytestmark = [pytest.mark.scale, pytest.mark.timeout(300)]
TRAINER = Path(__file__).with_name("ddp_fault_trainer.py")
STEP = 10


def _environment():
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                "MASTER_PORT")}
    environment.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=INTERFACE)
    return environment


def _checked(log_dir, launched, *, ranks, rank, host, loader):
    said = "\n".join(launched.outputs)
    # every rank aborted with the hang's status: torchrun fails
    assert set(launched.statuses) == {1}, said
    hang = [json.loads(line) for line in (log_dir / "job.jsonl").read_text().splitlines()
            if '"kind":"hang"' in line]
    assert len(hang) == 1, said
    hang = hang[0]
    assert (hang["waiting_for"], hang["holder_count"]) == (str(rank), 1), hang
    holder = hang["holders"][0]
    assert (holder["rank"], holder["host"], holder["phase"]) == (rank, host, "before_step")
    where = "__getitem__ (ddp_fault_trainer.py:" if loader else \
        "user_code_that_blocks (ddp_fault_trainer.py:"
    assert holder["where"].startswith(where), holder
    assert holder["text"].startswith(f"in its data loader before step {STEP}: " if loader
                                     else f"in its own code before step {STEP}: ")
    waiting = hang["waiting"]
    assert sorted(r for group in waiting for r in parse_rank_set(group["ranks"])) == \
        [r for r in range(ranks) if r != rank]
    assert waiting[0]["text"] == f"in step {STEP} (the step's collectives)", waiting
    for r in range(ranks):
        records = [json.loads(line) for line in
                   (log_dir / f"rank_{r}.jsonl").read_text().splitlines()]
        assert records[-1]["kind"] == "end" and records[-1]["reason"] == "aborted", (r, said)
    done = subprocess.run([sys.executable, "-m", "mindwatch.cli", "summary", str(log_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and not done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= 20 and f"HUNG ON RANK {rank}, ABORTED" in lines[0], done.stdout
    assert f"  hung: after step {STEP - 1}: the job waits for rank {rank} (host {host}): " \
        in done.stdout


def test_eight_ranks_one_stuck_in_its_data_loader(tmp_path):
    pytest.importorskip("torch", reason="make test-scale runs these in .venv-torch")
    log_dir = tmp_path / "run"
    environment = _environment()
    environment.pop("GLOO_SOCKET_IFNAME")
    launched = launch([[sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=8",
                        f"--master_port={free_port()}", str(TRAINER), str(log_dir), "loader", "2",
                        str(STEP)]], env=environment, cwd=tmp_path, names=["torchrun"],
                      timeout=240)
    _checked(log_dir, launched, ranks=8, rank=2, host=socket.gethostname(), loader=True)


def test_two_nodes_one_rank_stuck_in_its_own_code(tmp_path):
    pytest.importorskip("torch", reason="make test-scale runs these in .venv-torch")
    log_dir = tmp_path / "run"
    with two_nodes() as nodes:
        commands = [node.command(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=2",
             f"--node_rank={index}", f"--master_addr={nodes[0].address}",
             "--master_port=8118", str(TRAINER), str(log_dir), "user", "3", str(STEP)])
            for index, node in enumerate(nodes)]
        launched = launch(commands, env=_environment(), cwd=tmp_path,
                          names=["torchrun_node_a", "torchrun_node_b"], timeout=240)
    _checked(log_dir, launched, ranks=4, rank=3, host="node-b", loader=False)
