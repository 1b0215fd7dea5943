"""Which rank this process is and how many there are, from the launcher's environment.

The MindSpore adapter asks the communication layer first when it is initialised; this is
the framework-free fallback that also serves a custom loop. Variables, in order of trust:
``RANK_ID``/``RANK_SIZE`` (Ascend launchers, msrun), ``RANK``/``WORLD_SIZE`` (torchrun
style), ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE`` (mpirun), ``MS_NODE_ID`` and
``MS_WORKER_NUM`` (MindSpore's dynamic cluster).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

_RANK_VARS = ("RANK_ID", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MS_NODE_ID")
_SIZE_VARS = ("RANK_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MS_WORKER_NUM")
_LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MS_LOCAL_RANK")


@dataclass(frozen=True)
class RankInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0


def _first_int(env: Mapping[str, str], names) -> Optional[int]:
    for name in names:
        text = env.get(name, "").strip()
        if text.isdigit():
            return int(text)
    return None


def rank_from_env(env: Optional[Mapping[str, str]] = None) -> RankInfo:
    env = os.environ if env is None else env
    rank = _first_int(env, _RANK_VARS) or 0
    world_size = max(_first_int(env, _SIZE_VARS) or 1, rank + 1)
    local_rank = _first_int(env, _LOCAL_RANK_VARS)
    return RankInfo(rank=rank, world_size=world_size,
                    local_rank=rank if local_rank is None else local_rank)
