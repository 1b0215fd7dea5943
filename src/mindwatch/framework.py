"""What the framework-free core needs from a training framework, handed in at construction.

An adapter (``mindwatch.mindspore``) builds one ``FrameworkHooks`` and gives it to
``Monitor(..., framework=hooks)``; the core calls the hooks and never reaches into the
framework itself. A custom loop without a framework passes none: anomalies are still
detected, logged and reported, but no checkpoint can be written.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .observation import ReplayOutcome
from .sinks.base import SinkFactory

if TYPE_CHECKING:
    from .ranks.consensus import RankConsensus
    from .ranks.peers import Peers
    from .ranks.rank_sync import Fingerprinter
    from .recovery.rewinding import SnapshotStore
    from .recovery.skipping import SkipLimits


@dataclass(frozen=True, kw_only=True)
class SavedStates:
    """Training states that something else saved (MindSpore's ``ModelCheckpoint``), for a
    report to name the last good one when mindwatch's own checkpoint holds a bad update.

    - ``states``: ``(step, path)`` of each file still on disk, oldest first; the file holds
      the weights after that step's update.
    - ``saves_at_end``: who saves the weights once more when training ends (e.g.
      ``"ModelCheckpoint (prefix 'net' in ckpt/)"``), or None.
    """

    states: tuple[tuple[int, str], ...] = ()
    saves_at_end: str | None = None

    def last_before(self, step: int) -> tuple[int, str] | None:
        """The newest state saved before ``step``'s update."""
        earlier = [state for state in self.states if state[0] < step]
        return earlier[-1] if earlier else None


@dataclass(frozen=True, kw_only=True)
class FrameworkHooks:
    """The framework's side of the monitor; every hook is optional.

    - ``versions``: package versions for the ``run`` record (e.g. ``{"mindspore": "2.10.0"}``).
    - ``untested``: one line for each of those versions that mindwatch is not tested with
      (``basics.versions.ReleaseTable.untested``); said once, as notices at the start of
      the first run segment, and training goes on.
    - ``save_checkpoint(step, reason) -> path or None``: writes the weights (and optimizer
      state) of the last completed step into the run directory, atomically, as
      ``run_dir.checkpoint_path(log_dir, step, rank, reason)`` (reason ``"anomaly"`` or
      ``"signal"``); called on the training thread at that step's end when a policy asks for
      a checkpoint. It may raise (a full disk): that is said once, and the policy's stop
      still happens.
    - ``resume_hint(checkpoint_path) -> str``: code that resumes from that checkpoint, for
      the anomaly report.
    - ``notes() -> list of str``: facts about how training is set up that every anomaly
      report should state (asked at report time, so they may change after construction).
    - ``memory_reader() -> dict``: the framework's device-memory accounting, sampled on the
      hardware thread (plain numbers; must not raise, or it is reported once and retried).
    - ``snapshots``: a ``rewinding.SnapshotStore`` (``take(step)``, ``restore(step)``,
      ``drop(step)``) over the whole training state, in host memory; needed by
      ``on_anomaly="rewind"``, called on the training thread at step ends.
    - ``sinks``: views only the framework can write, keyed by the boolean setting that
      switches each on (``{"mindinsight": factory}``); opened with every run segment.
    - ``unprotected() -> str or None``: None when the train step withholds anomalous
      updates itself; else why this set-up cannot, and what the user can change so that
      it does (asked at report time).
    - ``saved_states() -> SavedStates``: what other parts of the training script saved.
    - ``tensorboard_dir(rank) -> str or None``: where this rank's TensorBoard events go
      (``tensorboard=True``) when the framework has TensorBoard runs of its own, so both
      show side by side; None: ``<log_dir>/tensorboard/rank_<R>``. Asked when the sinks
      open (each run segment's start).
    - ``replay() -> ReplayOutcome or None``: the step just observed, whose update was
      withheld, computed again on the same batch and weights with its update withheld
      (decisions/replays.py); None when this set-up cannot.
    - ``consensus(world_size, notice, peers) -> RankConsensus or None``: the ranks' exchange
      through the framework's collective (``ranks.consensus.consensus_of``), built once when
      a segment starts on several ranks; None where communication is not initialised.
    - ``fingerprinter(state) -> Fingerprinter``: fingerprints of the replicas' training state
      (``Monitor.end_step``'s ``replicas``), compared every ``consistency_interval`` steps.
    - ``push_limits(limits)``: hands the protected step the limits its next step is judged
      by (``recovery.skipping.SkipLimits``): after every step end, at a segment's start and
      after ``load_state_dict``.
    - ``replicated() -> bool``: every rank holds the same training state (pure data
      parallelism: no tensor, pipeline, expert or optimizer-state sharding), so a job-level
      event needs one report and one checkpoint, rank 0's (decisions/job_share.py); asked
      when an anomaly is acted on. None or False (unknown, or sharded): each rank writes its
      own, as its part of the state.
    """

    versions: Mapping[str, str | None] = field(default_factory=dict)
    untested: tuple[str, ...] = ()
    save_checkpoint: Callable[[int, str], str | None] | None = None
    resume_hint: Callable[[str], str] | None = None
    notes: Callable[[], list[str]] | None = None
    memory_reader: Callable[[], Mapping[str, Any]] | None = None
    snapshots: SnapshotStore | None = None
    sinks: Mapping[str, SinkFactory] = field(default_factory=dict)
    unprotected: Callable[[], str | None] | None = None
    saved_states: Callable[[], SavedStates] | None = None
    tensorboard_dir: Callable[[int], str | None] | None = None
    replay: Callable[[], ReplayOutcome | None] | None = None
    consensus: Callable[[int, Callable[[str], None], Peers], RankConsensus | None] | None = None
    fingerprinter: Callable[[Any], Fingerprinter] | None = None
    push_limits: Callable[[SkipLimits], None] | None = None
    replicated: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        for name in ("save_checkpoint", "resume_hint", "notes", "memory_reader", "unprotected",
                     "saved_states", "tensorboard_dir", "replay", "consensus", "fingerprinter",
                     "push_limits", "replicated"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise TypeError(f"FrameworkHooks.{name} must be callable or None; got "
                                f"{type(hook).__name__}")
        if not isinstance(self.untested, tuple) or not all(isinstance(line, str)
                                                           for line in self.untested):
            raise TypeError("FrameworkHooks.untested must be a tuple of str; got "
                            f"{self.untested!r}")
        for setting, factory in self.sinks.items():
            if not callable(factory):
                raise TypeError(f"FrameworkHooks.sinks[{setting!r}] must be callable "
                                f"(SinkContext -> Sink); got {type(factory).__name__}")

    def tensorboard_directory(self, rank: int) -> str | None:
        return self.tensorboard_dir(rank) if self.tensorboard_dir is not None else None

    def report_notes(self) -> list[str]:
        return list(self.notes()) if self.notes is not None else []

    def replicated_state(self) -> bool:
        """``replicated()``; False where the hook cannot tell (none, or it raised): every
        rank then keeps its own files, which loses nothing."""
        try:
            return bool(self.replicated()) if self.replicated is not None else False
        except Exception:
            return False
