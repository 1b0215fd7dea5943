"""The scale jobs' launchers (msrun, torchrun: one per node), started together and waited for
together, each one's output in a file (two launchers' pipes read one after the other could
fill and stall the second)."""
from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Launched:
    statuses: list[int]
    outputs: list[str]       # each launcher's stdout and stderr, its last 3000 characters
    wall_s: float            # from the first start to the last end


def _end_tree(process: subprocess.Popen) -> None:
    """A launcher past its time, and its ranks: msrun starts each in a session of its own,
    which a kill of msrun alone would leave training on the cores the next job needs."""
    import psutil
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    for child in tree:
        with contextlib.suppress(psutil.Error):
            child.kill()
    process.kill()
    process.wait()


def launch(commands: list[list[str]], *, env: dict[str, str], cwd: Path, names: list[str],
           timeout: float) -> Launched:
    """Runs ``commands`` at once; each one's output in ``cwd/<name>.out``."""
    outputs = [cwd / f"{name}.out" for name in names]
    processes: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        for command, output in zip(commands, outputs, strict=True):
            with open(output, "w") as out:
                processes.append(subprocess.Popen(command, env=env, cwd=cwd, stdout=out,
                                                  stderr=subprocess.STDOUT, text=True))
        deadline = started + timeout
        for process in processes:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        wall_s = time.monotonic() - started
    finally:
        for process in processes:
            if process.poll() is None:
                _end_tree(process)
    return Launched([p.returncode for p in processes],
                    [o.read_text(errors="replace")[-3000:] for o in outputs], wall_s)
