"""Rank and world size from MindSpore's communication layer, else from the launcher."""
from __future__ import annotations

from ...basics.rank import RankInfo, rank_from_env


def communication_initialised() -> bool:
    try:
        from mindspore.communication.management import GlobalComm
        return bool(GlobalComm.INITED)
    except ImportError:
        return False


def current_rank() -> RankInfo:
    env = rank_from_env()
    try:
        from mindspore.communication import get_group_size, get_local_rank, get_rank
        from mindspore.communication.management import GlobalComm
        if GlobalComm.INITED:
            try:
                local = get_local_rank()
            except RuntimeError:            # not every backend knows the local rank
                local = env.local_rank
            return RankInfo(rank=get_rank(), world_size=get_group_size(), local_rank=local)
    except (ImportError, RuntimeError):
        pass
    return env


def replicated_state(world_size: int, sharded: bool | None = None) -> bool:
    """Whether every rank holds the same training state (``FrameworkHooks.replicated``):
    several ranks whose communication is initialised, in ``DATA_PARALLEL`` mode, on one
    pipeline stage, without the parallel optimizer (which shards the optimizer state across
    the data-parallel ranks). ``sharded``: what a framework's own parallel config says of
    tensor, pipeline and expert parallelism (MindFormers' ``parallel_config``; None:
    unknown). False says the model is whole on every rank, which makes ``SEMI_AUTO_PARALLEL``
    (whose sharding is otherwise each operator's strategy) replicated too.

    Not replicated: ``STAND_ALONE`` (no gradient reduction: each rank's weights are its own,
    even under msrun), ``AUTO_PARALLEL`` and ``HYBRID_PARALLEL`` (sharding chosen by a
    search or by hand), and whatever the context cannot say: each rank then saves its own.
    """
    if world_size < 2 or sharded or not communication_initialised():
        return False
    try:
        import mindspore as ms
        mode = ms.get_auto_parallel_context("parallel_mode")
        optimizer_shard = ms.get_auto_parallel_context("enable_parallel_optimizer")
        stages = ms.get_auto_parallel_context("pipeline_stages")
    except (ImportError, RuntimeError, ValueError):
        return False
    modes = ("data_parallel", "semi_auto_parallel") if sharded is False else ("data_parallel",)
    return mode in modes and not optimizer_shard and int(stages or 1) == 1
