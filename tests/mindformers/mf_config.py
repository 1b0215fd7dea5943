"""The YAML config and the launcher run that the MindFormers tests share: a 1-layer legacy
Llama on the CPU (see mf_launcher.py for what the CPU needs), mindwatch in its `callbacks:`."""
import json
import os
import re
import select
import subprocess
import sys
from pathlib import Path

import yaml

from msrun_env import free_port, msrun_environment

HERE = Path(__file__).parent
REGISTER_PATH = str(Path(__file__).parents[2] / "src" / "mindwatch" / "mindformers" / "register")
STEPS = 20
# MFLossMonitor's line: "step:[    6/   20], loss:[4.861962/4.856197], ..., lr: 0.001, ...
# global_norm: [1.5296158]"
MF_LINE = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:\[([^/]+)/[^\]]+\].*?lr: ([^,]+), "
                      r"overflow cond: (\w+).*?global_norm: \[?([^\],]+)\]?")


# runner_wrapper entries: MindFormers' own cell (made to run on the CPU, mf_launcher.py) and
# mindwatch's, registered through the YAML as a user registers it
MF_CELL = {"type": "CPUTrainOneStepCell"}
MINDWATCH_CELL = {"type": "MindWatchTrainOneStepCell",
                  "auto_register": "mindwatch_callback.MindWatchTrainOneStepCell"}


# One layer by default: a Trainer run's CPU time is mostly its graph's compilation, which a
# second layer makes ~45% longer (8.1 against 6.4 s a run; the MindFormers tests, ~40 runs,
# 336 against 249 s of CPU). Nothing they check needs a second; benchmarks/ trains two.
def mf_config(tmp_path, *, mindwatch=True, callbacks=(), clip=True, cell=MF_CELL, monitor=None,
              layers=1, **top):
    monitor = {"type": "MindWatchMonitor", "auto_register": "mindwatch_callback.MindWatchMonitor",
               "log_dir": str(tmp_path / "mw"), "hardware_interval_s": None, **(monitor or {})}
    config = {
        "seed": 0, "output_dir": str(tmp_path / "output"), "load_checkpoint": "",
        "run_mode": "train", "use_parallel": False,
        "trainer": {"type": "CausalLanguageModelingTrainer", "model_name": "llama_tiny"},
        "runner_config": {"epochs": 1, "batch_size": 2, "sink_mode": False, "sink_size": 1,
                          "gradient_accumulation_steps": 1},
        "optimizer": {"type": "AdamW", "betas": [0.9, 0.95], "eps": 1e-8,
                      "learning_rate": 1e-3},
        "lr_schedule": {"type": "LinearWithWarmUpLR", "learning_rate": 1e-3, "warmup_steps": 5,
                        "total_steps": -1},
        "callbacks": [{"type": "MFLossMonitor"}, *callbacks, *([monitor] if mindwatch else []),
                      {"type": "GlobalStepAtEnd"}],
        "context": {"mode": 0, "device_target": "CPU", "max_call_depth": 10000},
        "parallel": {"parallel_mode": 0},
        "parallel_config": {"data_parallel": 1, "model_parallel": 1, "pipeline_stage": 1,
                            "micro_batch_num": 1, "vocab_emb_dp": True,
                            "gradient_aggregation_group": 4},
        "micro_batch_interleave_num": 1,
        "model": {"model_config": {
            "type": "LlamaConfig", "batch_size": 2, "seq_length": 32, "hidden_size": 64,
            "num_layers": layers, "num_heads": 4, "vocab_size": 128, "multiple_of": 16,
            "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
            "ignore_token_id": -100, "compute_dtype": "float32",
            "layernorm_compute_type": "float32", "softmax_compute_type": "float32",
            "rotary_dtype": "float32", "param_init_type": "float32", "use_past": False,
            # the CPU: no fused RmsNorm kernel, no flash attention, the sliced rope
            "use_flash_attention": False, "use_rope_slice": True, "fused_rms_norm": False},
            "arch": {"type": "LlamaForCausalLM"}},
        "runner_wrapper": {**cell, "scale_sense": 1.0, "use_clip_grad": clip,
                           "max_grad_norm": 1e6},
        **top}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_launcher(tmp_path, config, *, returncode=0, **env):
    """The launcher's run of ``config`` (``env``: more environment variables), which must
    exit with ``returncode``; the updates the optimizer applied (GlobalStepAtEnd's line)."""
    result = subprocess.run(
        [sys.executable, str(HERE / "mf_launcher.py"), str(config)], cwd=tmp_path,
        env={**os.environ, "REGISTER_PATH": REGISTER_PATH, **env}, capture_output=True,
        text=True, timeout=280)
    assert result.returncode == returncode, \
        f"exit status {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    (tmp_path / "launcher.out").write_text(result.stdout + result.stderr)
    applied = re.search(r"optimizer global_step (\d+)", result.stdout)
    return int(applied.group(1)) if applied else None


def _applied(output):
    applied = re.search(r"optimizer global_step (\d+)", output)
    return int(applied.group(1)) if applied else None


class Launcher:
    """The launcher's runs in one process (``mf_launcher.py --serve``), which imports
    MindSpore and MindFormers once (each run of its own process spends ~4 s of CPU on that
    and on exiting): each run as ``run_launcher`` runs it (its own working directory,
    environment, output and exit status; mf_launcher.run_as_its_own_process says what it
    starts afresh), one after another. A process that died or hung is replaced by a new one
    for the next run. The tests that check how the launcher's process ends (an exit
    status of its own) run it in a process of their own (run_launcher)."""

    def __init__(self, workdir):
        self.workdir, self.process = Path(workdir), None

    def _start(self):
        read_end, self.reply_fd = os.pipe()
        self.replies = os.fdopen(read_end, "rb", buffering=0)
        log = open(self.workdir / "launcher-process.log", "ab")   # noqa: SIM115 (the process's)
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "mf_launcher.py"), "--serve", str(self.reply_fd)],
            cwd=self.workdir, env={**os.environ, "REGISTER_PATH": REGISTER_PATH},
            stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(self.reply_fd,))
        log.close()
        os.close(self.reply_fd)

    def run(self, tmp_path, config, *, returncode=0, timeout=280, **env):
        """What run_launcher returns for this run (the updates the optimizer applied), once
        it exited with ``returncode``; its output in ``tmp_path / "launcher.out"``. A config
        of another context than the process's (mf_launcher.CONTEXT_KEYS) gets a new one."""
        out = Path(tmp_path) / "launcher.out"
        request = {"config": str(config), "cwd": str(tmp_path), "env": env, "out": str(out)}
        status = self._ask(request, timeout)
        if status == "context":
            self.close()
            status = self._ask(request, timeout)
        output = out.read_text(errors="replace") if out.exists() else ""
        assert status == returncode, f"exit status {status}\n{output[-6000:]}"
        return _applied(output)

    def _ask(self, request, timeout):
        if self.process is None or self.process.poll() is not None:
            self._start()
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        ready, _, _ = select.select([self.replies], [], [], timeout)
        reply = self.replies.readline() if ready else b""
        if reply:
            return json.loads(reply)["status"]
        self.close()                                  # hung, or died in this run
        return (f"none: the launcher's process {'died' if ready else 'hung'} "
                f"({self.workdir / 'launcher-process.log'})")

    def close(self):
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=60)
            self.process.stdin.close()
            self.replies.close()
            self.process = None


def state_digests(output):
    """StateDigest's lines: step -> (digest of the training state, loss scale)."""
    return {int(m[1]): (m[2], float(m[3]))
            for m in re.finditer(r"state step (\d+) (\w+) scale (\S+)", output)}


def mf_steps(tmp_path, rank=0):
    """MFLossMonitor's records of each step, from MindFormers' own log. ``loss_abs``: half a
    unit of the loss's last printed digit (MindFormers 1.6 prints 3 decimals, later
    releases 6), what a loss that MindFormers rounded can differ by."""
    text = (tmp_path / "output" / "log" / f"rank_{rank}" / "info.log").read_text()
    return {int(m[1]): {"loss": float(m[2]), "lr": float(m[3]), "overflow": m[4] == "True",
                        "grad_norm": float(m[5]), "loss_abs": _half_last_digit(m[2])}
            for m in MF_LINE.finditer(text)}


# MFLossMonitor's line starts "{ Epoch:[  2/  2], step:[    6/   20], loss:..."
MF_EPOCH_LINE = re.compile(r"Epoch:\[\s*(\d+)/\s*(\d+)\], step:\[\s*(\d+)/\s*(\d+)\], loss:")


def mf_epoch_steps(tmp_path, rank=0):
    """MFLossMonitor's ``(epoch, step, steps_per_epoch)`` of each line it printed, in order
    (one a step at its default ``per_print_times``); ``mf_steps`` keys by the step alone."""
    text = (tmp_path / "output" / "log" / f"rank_{rank}" / "info.log").read_text()
    return [(int(m[1]), int(m[3]), int(m[4])) for m in MF_EPOCH_LINE.finditer(text)]


def _half_last_digit(printed):
    decimals = len(printed.strip().partition(".")[2])
    return 0.5 * 10.0 ** -decimals * (1 + 1e-6)


def data_parallel(config, ranks=2):
    """The same config for ``ranks`` data-parallel ranks (MindFormers' `use_parallel`)."""
    settings = yaml.safe_load(config.read_text())
    settings["use_parallel"] = True
    # MindFormers seeds only a true seed (`if config.seed:`): with 0 each rank would start from
    # its own random weights
    settings["seed"] = 1
    settings["parallel"] = {"parallel_mode": 0, "gradients_mean": True, "full_batch": False,
                            "enable_parallel_optimizer": False}
    settings["parallel_config"]["data_parallel"] = ranks
    config.write_text(yaml.safe_dump(settings))
    return config


def run_msrun_batch(root, runs, ranks=2):
    """One msrun job over mf_launcher.py --batch: on every rank each of ``runs`` (name ->
    config, each in its own folder ``root / name``, configs of one context) one after another,
    each as its own job's worker would run it (mf_launcher.run_as_its_own_process). Returns
    msrun's result; ``batch_result`` reads each run's."""
    plan = [{"config": str(config), "cwd": str(root / name), "env": {},
             "out": str(root / name / "worker_{rank}.log"),
             "status": str(root / name / "status_{rank}")} for name, config in runs.items()]
    (root / "plan.json").write_text(json.dumps(plan))
    return subprocess.run(
        [sys.executable, "-m", "mindspore.parallel.cluster.run", f"--worker_num={ranks}",
         f"--local_worker_num={ranks}", f"--master_port={free_port()}",
         f"--log_dir={root / 'msrun_logs'}", "--join=True", str(HERE / "mf_launcher.py"),
         "--batch", str(root / "plan.json")],
        cwd=root, env=msrun_environment(REGISTER_PATH=REGISTER_PATH), capture_output=True,
        text=True, timeout=400)


def batch_result(result, where, ranks=2):
    """The updates each rank's optimizer applied in the run of run_msrun_batch in ``where``,
    once every rank's run of it exited with status 0."""
    statuses = [where / f"status_{rank}" for rank in range(ranks)]
    workers = [(where / f"worker_{rank}.log").read_text(errors="replace")
               if (where / f"worker_{rank}.log").exists() else "" for rank in range(ranks)]
    job = [p.read_text(errors="replace")[-2000:]        # the workers' own, beside the runs'
           for p in sorted((where.parent / "msrun_logs").glob("worker_*.log"))]
    said = "\n".join(w[-3000:] for w in workers + job) + result.stderr[-2000:]
    assert [s.read_text() if s.exists() else None for s in statuses] == ["0"] * ranks, said
    return [_applied(w) for w in workers]
