"""Resuming a stopped run with MindFormers' own ``load_checkpoint`` and ``resume_training``.

How MindFormers (legacy checkpoint format, its default) resumes, read from its sources
(``trainer/trainer.py``, ``tools/resume_ckpt.py``, ``trainer/utils.py``
``load_resume_context_from_checkpoint`` and ``load_ckpt``, ``core/callback``
``CheckpointMonitor``), the same in every tested release:

- ``load_checkpoint: <dir>`` with ``resume_training: True``: ``<dir>/rank_<R>/`` holds this
  rank's files named ``<prefix>_rank_<R>-<epoch>_<step>.ckpt`` and ``meta.json``
  (``{"last_epoch", "last_step", "last_ckpt_file"}``, what CheckpointMonitor writes); rank 0
  picks the newest checkpoint every rank folder has (its pick goes through
  ``<output_dir>/resume_record/latest_checkpointed_iteration.txt``), each rank loads its own.
- From that file it reads ``step_num`` (the steps done: ``runner_config.initial_step``, the
  batches the dataset skips, MFLossMonitor's count), ``epoch_num`` (the epoch of that step:
  ``initial_epoch`` is one less when the step is not an epoch's last), ``loss_scale`` (the
  loss scale, with CheckpointMonitor in ``callbacks:``) and ``global_batch_size`` (when
  present, steps are scaled by its change); then every parameter of the network and of the
  optimizer (the moments, ``global_step``) loads from the same file.
- ``cur_step_num`` starts again at 1 in the resumed run: MindFormers' callbacks add the
  ``initial_step`` it hands them, and so does ``MindWatchMonitor`` (``steps_before``).

So on a checkpoint under MindFormers mindwatch puts those keys into its own checkpoint file
and links it (a hard link, or a copy where the file system has none) into
``<log_dir>/mindformers_resume/rank_<R>/`` with a ``meta.json``, and the report gives the
YAML that resumes from there.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..basics.run_dir import write_text_atomically
from ..decisions.anomaly_report import Snippet
from ..mindspore.reading.cb_params import field, steps_per_epoch
from ..records import Step
from . import compat

RESUME_DIR = "mindformers_resume"
PREFIX = "mindwatch"
META = "meta.json"
# ``RunLogExists``'s wording under MindFormers: what to set where the user configures it
RESUME_HOW = ("set `resume: True` in the MindWatchMonitor entry of callbacks: (resume=True "
              "where MindWatchMonitor(...) is built in Python)")
# The keys MindFormers' resume reads from the checkpoint (and CheckpointMonitor writes)
EPOCH_NUM, STEP_NUM, LOSS_SCALE = "epoch_num", "step_num", "loss_scale"
# CheckpointMonitor's file names, ``<prefix>_rank_<R>-<epoch>_<step>.ckpt`` (``_rank_<R>_<n>-``
# in a later process: MindSpore's ModelCheckpoint numbers a prefix already used)
_MINDFORMERS_NAME = re.compile(r"_rank_\d+(?:_\d+)?-\d+_\d+\.ckpt$")


def steps_before(cb: Any) -> int:
    """The steps a resumed MindFormers run did before this one (``runner_config.initial_step``),
    which its ``cur_step_num`` does not count: MindSpore's own ``initial_step`` where it
    resumed the run itself, else the one MindFormers gave its MFLossMonitor (or
    TrainingStateMonitor), else 0."""
    own = field(cb, "initial_step")
    if own is not None:
        return own if _count(own) else 0
    for callback in field(cb, "list_callback") or ():
        names = {kind.__name__ for kind in type(callback).__mro__}
        if names & {"MFLossMonitor", "TrainingStateMonitor"}:
            offset = getattr(callback, "initial_step", 0)
            return offset if _count(offset) else 0
    return 0


class ResumedParams:
    """MindSpore's callback parameters as mindwatch reads them in a resumed MindFormers run:
    ``cur_step_num`` counts on from the steps before (``steps_before``), as MFLossMonitor
    prints them, and ``initial_step`` is 0 (it is in ``cur_step_num`` already). Every other
    name reads and writes the real object."""

    __slots__ = ("_before", "_cb")

    def __init__(self, cb: Any, before: int):
        object.__setattr__(self, "_cb", cb)
        object.__setattr__(self, "_before", before)

    def __getattr__(self, name: str) -> Any:
        if name == "cur_step_num":
            return int(self._cb.cur_step_num) + self._before
        if name == "initial_step":
            return 0
        return getattr(self._cb, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._cb, name, value)


class ResumedContext:
    """A ``RunContext`` whose ``original_args()`` are ``ResumedParams``; a stop asked for
    through it is the real one's."""

    def __init__(self, run_context: Any, before: int):
        self._context = run_context
        self._params = ResumedParams(run_context.original_args(), before)

    def original_args(self) -> Any:
        return self._params

    def request_stop(self) -> None:
        self._context.request_stop()

    def get_stop_requested(self) -> bool:
        return self._context.get_stop_requested()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


@dataclass(frozen=True)
class ResumePoint:
    """The state a checkpoint holds, in MindFormers' terms: the state after ``step`` (the
    steps done, ``step_num``), in ``epoch`` at ``epoch_step`` of it; ``directory``, once
    linked into the resumable layout (``<log_dir>/mindformers_resume``)."""

    step: int
    epoch: int
    epoch_step: int
    loss_scale: float | None = None
    directory: str | None = None

    def keys(self) -> dict[str, Any]:
        """The entries MindFormers' resume reads, for the checkpoint file."""
        keys: dict[str, Any] = {EPOCH_NUM: self.epoch, STEP_NUM: self.step}
        if self.loss_scale is not None:
            keys[LOSS_SCALE] = self.loss_scale
        return keys

    def file_name(self, rank: int) -> str:
        """CheckpointMonitor's ``<prefix>_rank_<R>-<epoch>_<step in epoch>.ckpt``."""
        return f"{PREFIX}_rank_{rank}-{self.epoch}_{self.epoch_step}.ckpt"


def resume_point(step: int, history: Sequence[Mapping[str, Any]], cb: Any) -> ResumePoint:
    """What a checkpoint written at the end of ``step`` holds: the state after ``step``, or
    after ``step - 1`` when ``step``'s update was withheld (its step record says
    ``skipped``): weights, moments and ``global_step`` are then the step before's, and
    resuming trains ``step``'s batch again."""
    last = history[-1] if history else None
    withheld = bool(last is not None and last.get(Step.STEP) == step
                    and last.get(Step.SKIPPED))
    done = step - 1 if withheld and step > 0 else step
    per_epoch = steps_per_epoch(cb)
    if per_epoch is None:
        epoch = field(cb, "cur_epoch_num")
        return ResumePoint(done, epoch if _count(epoch) else 1, done, _loss_scale(cb))
    epoch = (done - 1) // per_epoch + 1 if done > 0 else 0
    return ResumePoint(done, epoch, done - (epoch - 1) * per_epoch if done > 0 else 0,
                       _loss_scale(cb))


def link_resumable(checkpoint: str, log_dir: str, ranks: Sequence[int],
                   point: ResumePoint) -> ResumePoint:
    """``checkpoint`` (holding ``point.keys()``) into ``<log_dir>/mindformers_resume/rank_<R>/``
    for each of ``ranks`` under CheckpointMonitor's name, with the ``meta.json`` MindFormers
    picks it by; each file is written under a temporary name and renamed. Several ranks:
    under data parallelism rank 0's checkpoint is the job's (every rank holds the same state),
    and MindFormers' resume has every rank load from its own ``rank_<R>/`` (rank 0 counts
    the folders and picks a step all of them hold), so each rank's folder links the same
    file. Returns ``point`` with its directory. Raises OSError when the disk refuses."""
    directory = os.path.join(log_dir, RESUME_DIR)
    for rank in ranks:
        _link_rank(checkpoint, os.path.join(directory, f"rank_{rank}"), rank, point)
    return ResumePoint(point.step, point.epoch, point.epoch_step, point.loss_scale, directory)


def _link_rank(checkpoint: str, rank_dir: str, rank: int, point: ResumePoint) -> None:
    os.makedirs(rank_dir, exist_ok=True)
    name = point.file_name(rank)
    final = os.path.join(rank_dir, name)
    temporary = f"{final}.tmp-{os.getpid()}"
    try:
        try:
            os.link(checkpoint, temporary)
        except OSError:                   # no hard links here: a copy
            shutil.copyfile(checkpoint, temporary)
        os.replace(temporary, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    write_text_atomically(os.path.join(rank_dir, META), json.dumps(
        {"last_epoch": point.epoch, "last_step": point.epoch_step, "last_ckpt_file": name}))


def yaml_advice(path: str, point: ResumePoint | None) -> Snippet:
    """The YAML that goes on from the checkpoint at ``path``. MindFormers resumes (optimizer
    state, step count, data position) from a folder of ``rank_<R>/`` folders only (given a
    file, ``resume_training`` refuses: "checkpoint_path is not a directory"): mindwatch's
    resumable layout when ``point`` has one, or the folder of a file MindFormers'
    CheckpointMonitor wrote, resuming every rank from its own file of that step. Any other
    file loads its weights alone."""
    name = os.path.basename(path)
    if point is not None and point.directory is not None:
        what = [f"# the state after step {point.step} (weights, optimizer moments, "
                "global_step) loads and",
                f"# training goes on at step {point.step + 1}, on the batches after the "
                f"{point.step} done"]
        load = [f"load_checkpoint: {json.dumps(point.directory)}", "resume_training: True"]
    elif _MINDFORMERS_NAME.search(name) and re.fullmatch(
            r"rank_\d+", os.path.basename(os.path.dirname(path))):
        what = ["# the weights, optimizer state and step count of that checkpoint load on "
                "every rank,", "# and training goes on after its step"]
        load = [f"load_checkpoint: {json.dumps(os.path.dirname(os.path.dirname(path)))}",
                f"resume_training: {json.dumps(name)}"]
    else:
        what = ["# the weights of that checkpoint load into the model (the optimizer starts "
                "afresh)"]
        load = [f"load_checkpoint: {json.dumps(path)}"]
    return Snippet("\n".join([
        "# Add to the YAML config and run run_mindformer.py --config ... as before:",
        *what, *load,
        "callbacks:",
        "  - type: MindWatchMonitor    # your entry, its other keys kept, and:",
        "    resume: True              # append to its run log",
    ]), "yaml")


def _loss_scale(cb: Any) -> float | None:
    """The loss scale the train cell returned (CheckpointMonitor saves the same)."""
    outputs = field(cb, "net_outputs")
    if not compat.outputs_of_train_cell(outputs):
        return None
    with contextlib.suppress(Exception):
        value = np.asarray(outputs[2].asnumpy() if hasattr(outputs[2], "asnumpy")
                           else outputs[2], np.float64).reshape(-1)
        if value.size == 1 and np.isfinite(value[0]):
            return float(value[0])
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
