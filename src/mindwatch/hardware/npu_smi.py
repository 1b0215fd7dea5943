"""Ascend NPU state through Huawei's ``npu-smi`` command-line tool.

The probe runs beside training, so it must never raise, never block much longer than its
timeout, and never flood the log: each distinct problem is queued once for the caller to log
(``pop_new_messages``), and a tool that is plainly absent stops being called.
"""
from __future__ import annotations

import os
import subprocess
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..observation import DeviceSample
from ..rank import LOCAL_RANK_VARS, env_int, parse_index
from .messages import OnceMessages
from .npu_smi_parse import parse_info, parse_mapping, to_device_samples

# a missing tool may still appear (a driver install finishing); a few tries cost little
MAX_MISSING_TRIES = 3


def visible_devices_from_env(env: Optional[Mapping[str, str]] = None) -> Optional[List[int]]:
    """Logic ids of the NPUs this rank uses, or ``None`` for "no hint: all of them".

    Precedence: ``ASCEND_RT_VISIBLE_DEVICES`` (comma list of logic ids) narrows what the
    process can see, and the runtime renumbers those from 0, so ``DEVICE_ID`` - or, without
    it, the local rank (``LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_RANK``, ``MS_LOCAL_RANK``) -
    picks one entry of that list. An id that is past the list's end but in it is taken as
    already absolute (launchers that set both to the same physical id); otherwise the whole
    list is returned. Without the list, ``DEVICE_ID``, then the local rank, is the logic id.
    """
    env = os.environ if env is None else env
    visible: Optional[List[int]] = None
    raw = (env.get("ASCEND_RT_VISIBLE_DEVICES") or "").strip()
    if raw:
        parts = raw.split(",")
        numbers = [n for n in map(parse_index, parts) if n is not None]
        if len(numbers) == len(parts):
            visible = numbers
    chosen = env_int(env, "DEVICE_ID", *LOCAL_RANK_VARS)
    if visible is None:
        return None if chosen is None else [chosen]
    if chosen is not None and chosen < len(visible):
        return [visible[chosen]]
    if chosen is not None and chosen in visible:
        return [chosen]
    return visible


class NpuSmiProbe:
    """``sample()`` returns one ``DeviceSample`` per NPU chip (index = logic id), never raises.

    ``devices``: logic ids to keep (``None``: all). ``runner``: stands in for
    ``subprocess.run`` (same call), for tests. ``last_error`` is the problem of the latest
    call (``None`` when it was clean); ``disabled_reason`` says why ``enabled`` went False.
    """

    def __init__(self, *, devices: Optional[Sequence[int]] = None,
                 executable: str = "npu-smi", timeout_s: float = 2.0,
                 runner: Optional[Callable] = None):
        self.devices = None if devices is None else {int(d) for d in devices}
        self.executable = executable
        self.timeout_s = float(timeout_s)
        self.enabled = True
        self.disabled_reason: Optional[str] = None
        self.last_error: Optional[str] = None
        self._runner = runner or subprocess.run
        self._mapping: Optional[Dict[Tuple[int, int], int]] = None
        self._missing = 0
        self._messages = OnceMessages()

    def pop_new_messages(self) -> List[str]:
        """Problems not handed out before, each distinct text once per probe."""
        return self._messages.pop()

    def _report(self, message: str, key: Optional[str] = None) -> None:
        self.last_error = message
        self._messages.report(key or message, message)

    def _run(self, *args: str) -> Optional[str]:
        """The tool's stdout, or None when there is none worth parsing."""
        argv = [self.executable, *args]
        shown = " ".join(argv)
        try:
            done = self._runner(argv, timeout=self.timeout_s, capture_output=True, text=True)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            self._missing += 1
            self._report(f"{self.executable} cannot be run ({exc.__class__.__name__}: "
                         f"{exc.strerror or exc}); NPU samples are empty")
            if self._missing >= MAX_MISSING_TRIES:
                self.enabled = False
                self.disabled_reason = (f"{self.executable} could not be run "
                                        f"{self._missing} times in a row; NPU sampling is off")
                self._report(self.disabled_reason)
            return None
        except subprocess.TimeoutExpired:
            self._report(f"'{shown}' gave no answer within {self.timeout_s:g} s; "
                         f"NPU samples skipped while it hangs")
            return None
        except Exception as exc:  # the runner is pluggable; nothing may escape sample()
            self._report(f"'{shown}' failed: {exc.__class__.__name__}: {exc}",
                         key=f"{shown} raised {exc.__class__.__name__}")
            return None
        self._missing = 0
        stdout = getattr(done, "stdout", None)
        stdout = stdout if isinstance(stdout, str) else ""
        code = getattr(done, "returncode", 0)
        if code != 0:
            # the table may still be there (one card in trouble): report and parse anyway
            stderr = getattr(done, "stderr", None)
            lines = (stderr if isinstance(stderr, str) else "").strip().splitlines()
            detail = f": {lines[0][:200]}" if lines else ""
            self._report(f"'{shown}' exited with status {code}{detail}",
                         key=f"{shown} exit {code}")
        return stdout

    def _logic_ids(self) -> Dict[Tuple[int, int], int]:
        # the card/chip -> logic id mapping is fixed while the machine runs: ask once
        if self._mapping is None:
            text = self._run("info", "-m")
            self._mapping = {(m.npu_id, m.chip_id): m.logic_id
                             for m in parse_mapping(text or "")}
        return self._mapping

    def sample(self) -> List[DeviceSample]:
        if not self.enabled:
            return []
        try:
            self.last_error = None
            text = self._run("info")
            if text is None:
                return []
            chips = parse_info(text)
            if not chips:
                first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
                self._report(f"'{self.executable} info' printed no NPU table"
                             + (f" (first line: {first[:120]!r})" if first else " (empty)"),
                             key="no table")
                return []
            samples = to_device_samples(chips, self._logic_ids())
            if self.devices is not None:
                samples = [s for s in samples if s.index in self.devices]
            return samples
        except Exception as exc:  # see _run
            self._report(f"NPU sampling failed: {exc.__class__.__name__}: {exc}",
                         key=f"sample raised {exc.__class__.__name__}")
            return []
