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
