"""Issue #44's slow ranks by cause, in real jobs on this host: msrun of 8 ranks with rank 5
slower in its compute (an extra matmul chain inside its step's graph) or in its input (its
dataset's source sleeps per batch) (ms_slow_trainer.py), and torchrun of 4 ranks, DDP over
gloo, rank 3's forward doing extra matmuls (ddp_slow_trainer.py). In each, the slow rank and
no other names itself a ``straggler`` with the cause and its host, within 30 steps after the
warm-up (``trend_warmup``, 50 steps), and rank 0's job log's event says which rank is slow
now and by what.

The jobs run one after another (their ranks would share the two cores). Measured on the
2-core host: msrun compute 8 ranks 44-48 s, data 49-52 s, torchrun 4 ranks 14 s."""
import json
import os
import socket
import sys
from pathlib import Path

import pytest
from launchers import launch

from mindwatch.runlog import read_run
from msrun_env import free_port, msrun_environment

pytestmark = [pytest.mark.scale, pytest.mark.timeout(300)]
HERE = Path(__file__).parent
WARMUP, WITHIN = 50, 30          # trend_warmup's default; the goal after it


def _stragglers(log_dir: Path) -> dict[int, list[dict]]:
    """Each rank's straggler anomalies."""
    run = read_run(str(log_dir))
    return {log.rank: [a for a in log.anomalies if a["anomaly"] == "straggler"]
            for log in run.ranks}


def _events(log_dir: Path) -> list[dict]:
    with open(log_dir / "job.jsonl", encoding="utf-8") as handle:
        return [r for r in map(json.loads, handle) if r["kind"] == "event"]


def _msrun_job(root: Path, cause: str, slow: int, ranks: int = 8) -> Path:
    # the module itself: tests/mindspore would import as a namespace package here
    pytest.importorskip("mindspore.communication", reason="make test-scale runs these in .venv")
    log_dir, msrun_logs = root / "run", root / "msrun_logs"
    command = [sys.executable, "-m", "mindspore.parallel.cluster.run", f"--worker_num={ranks}",
               f"--local_worker_num={ranks}", f"--master_port={free_port()}",
               f"--log_dir={msrun_logs}", "--join=True", str(HERE / "ms_slow_trainer.py"),
               str(log_dir), cause, str(slow)]
    launched = launch([command], env=msrun_environment(), cwd=root, names=["msrun"],
                      timeout=240)
    assert launched.statuses == [0], launched.outputs[0]
    return log_dir


def _assert_named(log_dir: Path, slow: int, cause: str, world_size: int) -> None:
    """Only ``slow`` is a straggler, once, with ``cause`` and its host, in time; the job's
    event names it as slow now, by that cause."""
    found = _stragglers(log_dir)
    assert sorted(found) == list(range(world_size))
    assert {rank: len(a) for rank, a in found.items() if a} == {slow: 1}, \
        {rank: [x["message"] for x in a] for rank, a in found.items() if a}
    anomaly = found[slow][0]
    host = socket.gethostname()
    assert anomaly["cause"] == cause, anomaly
    assert anomaly["message"].startswith(f"rank {slow} (host {host}) is a straggler"), anomaly
    assert anomaly["step"] <= WARMUP + WITHIN or cause == "data", anomaly
    events = [e for e in _events(log_dir) if "straggler" in e["kinds"]]
    assert [e["ranks"] for e in events] == [str(slow)], events
    assert events[0]["message"].endswith(f"slow now: rank {slow} (host {host}) by its "
                                         f"{cause}"), events[0]


@pytest.fixture(scope="module")
def compute_job(tmp_path_factory):
    return _msrun_job(tmp_path_factory.mktemp("slow_compute"), "compute", 5)


@pytest.fixture(scope="module")
def data_job(tmp_path_factory):
    return _msrun_job(tmp_path_factory.mktemp("slow_data"), "data", 5)


def test_msrun_a_node_whose_ranks_are_all_slow_is_named_as_the_host(tmp_path):
    """Two msrun invocations (two_nodes.py: node-a ranks 0-3, node-b ranks 4-7), every rank of
    node-b slower in compute: each names itself, and the job's event names the host."""
    pytest.importorskip("mindspore.communication", reason="make test-scale runs these in .venv")
    from two_nodes import two_nodes
    log_dir = tmp_path / "run"
    with two_nodes() as nodes:
        commands = [node.command(
            [sys.executable, "-m", "mindspore.parallel.cluster.run", "--worker_num=8",
             "--local_worker_num=4", "--master_port=8120", f"--node_rank={index}",
             f"--master_addr={nodes[0].address}", f"--log_dir={tmp_path / f'msrun_{index}'}",
             "--join=True", str(HERE / "ms_slow_trainer.py"), str(log_dir), "compute", "4-7"])
            for index, node in enumerate(nodes)]
        launched = launch(commands, env=msrun_environment(), cwd=tmp_path,
                          names=["msrun_node_a", "msrun_node_b"], timeout=240)
    assert launched.statuses == [0, 0], launched.outputs
    found = _stragglers(log_dir)
    assert {rank: [a["cause"] for a in found[rank]] for rank in found if found[rank]} == \
        {rank: ["compute"] for rank in range(4, 8)}, found
    messages = [e["message"] for e in _events(log_dir) if "straggler" in e["kinds"]]
    assert any(m.endswith("slow now: all 4 ranks of host node-b (ranks 4-7) by their "
                          "compute: the host") for m in messages), messages


def test_msrun_rank_slow_in_compute_is_named_with_its_cause(compute_job):
    _assert_named(compute_job, 5, "compute", 8)


def test_msrun_rank_slow_in_input_is_named_with_cause_data(data_job):
    _assert_named(data_job, 5, "data", 8)


def test_torchrun_rank_slow_in_compute_is_named_with_its_cause(tmp_path):
    pytest.importorskip("torch", reason="make test-scale runs these in .venv-torch")
    log_dir = tmp_path / "run"
    log_dir.mkdir()
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                "MASTER_PORT")}
    environment.update(OMP_NUM_THREADS="1")
    launched = launch([[sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4",
                        f"--master_port={free_port()}", str(HERE / "ddp_slow_trainer.py"),
                        str(log_dir), "3"]],
                      env=environment, cwd=tmp_path, names=["torchrun"], timeout=180)
    assert launched.statuses == [0], launched.outputs[0]
    _assert_named(log_dir, 3, "compute", 4)
