"""Issue #44 under MindSpore: real msrun jobs of 8 ranks (one of 16, one on two nodes) in which
one rank holds the others (ms_fault_trainer.py): stuck in its own code before a step, stuck in
its data loader, never started, killed outright. Every rank aborts on the hang
(``hang_timeout_s`` 8 s); rank 0's job log, ``heartbeats/hang_answer.json`` and ``mindwatch
summary`` name the rank the job waits for, with its host and where it is, and where the
others wait; a killed rank is accounted for by the views.

Each job ends when its ranks have (msrun's scheduler would wait its node timeout more:
msrun_env.msrun_until_its_ranks_end). Measured on the 2-core host: ~35-45 s a job of 8."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from two_nodes import two_nodes

from mindwatch.runlog import heartbeats as hb
from msrun_env import free_port, msrun_environment, msrun_until_its_ranks_end

pytestmark = [pytest.mark.scale, pytest.mark.timeout(400)]
TRAINER = Path(__file__).with_name("ms_fault_trainer.py")
STEP = 10


def _command(root, fault, rank, *, ranks, local=None, node=None, master=None, port=None):
    command = [sys.executable, "-m", "mindspore.parallel.cluster.run", f"--worker_num={ranks}",
               f"--local_worker_num={local or ranks}", f"--master_port={port or free_port()}",
               f"--log_dir={root / f'msrun_{node or 0}'}", "--join=True"]
    if node is not None:
        command += [f"--node_rank={node}", f"--master_addr={master}"]
    return [*command, str(TRAINER), str(root / "run"), fault, str(rank), str(STEP)]


def _job(root, fault, rank, ranks=8):
    pytest.importorskip("mindspore", reason="make test-scale runs these in .venv")
    done = msrun_until_its_ranks_end(_command(root, fault, rank, ranks=ranks), ranks=ranks,
                                     cwd=root, env=msrun_environment(), timeout=300)
    return root / "run", done.stdout[-3000:] + done.stderr[-3000:]


def _summary(log_dir):
    done = subprocess.run([sys.executable, "-m", "mindwatch.cli", "summary", str(log_dir)],
                          capture_output=True, text=True, timeout=120)
    # never 2: every rank accounted for
    assert done.returncode == 1 and not done.stderr, (done.returncode, done.stderr)
    return done.stdout


def _job_hang(log_dir):
    """The job log's hang record (rank 0's), or the heartbeats' answer when the ranks never
    opened a job log (a rank that never started)."""
    path = log_dir / "job.jsonl"
    if path.exists():
        hangs = [json.loads(line) for line in path.read_text().splitlines()
                 if '"kind":"hang"' in line]
        if hangs:
            assert len(hangs) == 1, hangs
            assert hangs[0] == {**hb.read_answer(str(log_dir)), "rank": 0} | {
                "time": hangs[0]["time"]}
            return hangs[0]
    return hb.read_answer(str(log_dir))


def _assert_named(log_dir, said, *, rank, host, state, phase, where, waiting_text, ranks=8):
    hang = _job_hang(log_dir)
    assert hang is not None, said
    assert (hang["waiting_for"], hang["holder_count"], hang["answered_by"]) == \
        (str(rank), 1, 0), hang
    holder = hang["holders"][0]
    assert (holder["rank"], holder["host"], holder["state"], holder["phase"]) == \
        (rank, host, state, phase), holder
    assert where in holder["where"], holder
    others = [r for r in range(ranks) if r != rank]
    assert hang["waiting"][0]["count"] == ranks - 1 and \
        hang["waiting"][0]["text"] == waiting_text, hang["waiting"]
    assert sorted(int(r) for g in hang["waiting"] for r in _expand(g["ranks"])) == others
    # every rank wrote its own hang record (where it waited) and its end, aborted
    for r in range(ranks):
        records = [json.loads(line) for line in
                   (log_dir / f"rank_{r}.jsonl").read_text().splitlines() if line]
        if r == rank and phase == hb.STARTING:
            assert records == [], records[:1]          # it never started
            continue
        assert any(x.get("anomaly") == "hang" for x in records), (r, said)
        assert records[-1]["kind"] == "end" and records[-1]["reason"] == "aborted", records[-1]
    return hang


def _expand(text):
    from mindwatch.basics.rank_set import parse_rank_set
    return parse_rank_set(text)


@pytest.fixture(scope="module")
def stuck_in_user_code(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("user"), "user", 6)


@pytest.fixture(scope="module")
def stuck_in_loader(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("loader"), "loader", 3, ranks=16)


@pytest.fixture(scope="module")
def never_started(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("start"), "start", 6)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("kill"), "kill", 6)


def test_a_rank_stuck_in_its_own_code_is_named_for_the_job(stuck_in_user_code):
    import socket
    log_dir, said = stuck_in_user_code
    hang = _assert_named(log_dir, said, rank=6, host=socket.gethostname(), state="stuck",
                         phase=hb.BEFORE_STEP, where="on_train_step_begin (ms_fault_trainer.py",
                         waiting_text=f"in step {STEP} (the step's collectives)")
    assert hang["holders"][0]["text"].startswith(f"in its own code before step {STEP}: ")
    text = _summary(log_dir)
    assert len(text.splitlines()) <= 20
    assert "HUNG ON RANK 6" in text.splitlines()[0] and "ABORTED" in text.splitlines()[0]
    assert f"  hung: after step {STEP - 1}: the job waits for rank 6 (host " in text
    # rank 0's own hang record names rank 6 as its origin
    rank0 = [json.loads(line) for line in (log_dir / "rank_0.jsonl").read_text().splitlines()
             if '"anomaly":"hang"' in line]
    assert rank0[0]["origin_rank"] == 6 and "the job waits for rank 6" in rank0[0]["message"]


def test_a_rank_stuck_in_its_data_loader_among_sixteen(stuck_in_loader):
    import socket
    log_dir, said = stuck_in_loader
    hang = _assert_named(log_dir, said, rank=3, host=socket.gethostname(), state="stuck",
                         phase=hb.BEFORE_STEP, where="iterators.py", ranks=16,
                         waiting_text=f"in step {STEP} (the step's collectives)")
    assert hang["holders"][0]["text"].startswith(f"in its data loader before step {STEP}: ")
    assert "the job waits for rank 3" in _summary(log_dir)


def test_a_rank_that_never_started_is_named_and_the_job_stays_readable(never_started):
    import socket
    log_dir, said = never_started
    hang = _assert_named(log_dir, said, rank=6, host=socket.gethostname(), state="stuck",
                         phase=hb.STARTING, where="main (ms_fault_trainer.py",
                         waiting_text="in the ranks' start-up exchange")
    assert hang["step"] == 0
    text = _summary(log_dir)
    assert "HUNG ON RANK 6, SILENT RANK 6" in text.splitlines()[0], text
    assert "  hung: before the first step: the job waits for rank 6" in text
    assert "  silent: rank 6: no record since start-up; last heartbeat " in text
    assert "never started: still in its start-up: main (ms_fault_trainer.py:" in text


def test_a_killed_rank_is_accounted_for(killed):
    log_dir, said = killed
    # msrun takes every other rank down when one dies: none ends, none hangs
    for rank in range(8):
        records = (log_dir / f"rank_{rank}.jsonl").read_text().splitlines()
        assert '"kind":"end"' not in records[-1], (rank, said)
    text = _summary(log_dir)
    assert "NO END RECORD" in text.splitlines()[0], text
    beats = hb.read_beats(str(log_dir))
    assert sorted(beats) == list(range(8))
    # Its heartbeat stopped at its death, the others' up to a period before msrun killed them
    # (~0.5 s later): when they tell, the summary names it as the likeliest to die first.
    named = [line for line in text.splitlines() if "stopped first" in line]
    assert not named or named[0].startswith("  silent: rank 6 "), text


def test_a_rank_of_the_second_node_stuck_in_its_own_code(tmp_path):
    """Two msrun invocations in their own UTS and network namespaces (two_nodes.py) over one
    shared run directory: node-b's rank 5 holds the job; rank 0 on node-a names it."""
    pytest.importorskip("mindspore", reason="make test-scale runs these in .venv")
    with two_nodes() as nodes:
        commands = [node.command(_command(tmp_path, "user", 5, ranks=8, local=4, node=index,
                                          master=nodes[0].address, port=8119))
                    for index, node in enumerate(nodes)]
        processes = [subprocess.Popen(c, cwd=tmp_path, env=msrun_environment(),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for c in commands]
        try:
            _wait_for_ends(tmp_path / "run", 8, timeout=300)
        finally:
            for process in processes:
                process.kill()
                process.wait()
    _assert_named(tmp_path / "run", "", rank=5, host="node-b", state="stuck",
                  phase=hb.BEFORE_STEP, where="on_train_step_begin (ms_fault_trainer.py",
                  waiting_text=f"in step {STEP} (the step's collectives)")


def _wait_for_ends(log_dir, ranks, *, timeout):
    """Until every rank's heartbeat says it ended (or the time is up)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        beats = hb.read_beats(str(log_dir))
        if len(beats) == ranks and all(b.state == hb.ENDED for b in beats.values()):
            return
        time.sleep(1.0)
