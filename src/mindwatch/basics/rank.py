"""Which rank this process is and how many there are, from the launcher's environment.

The MindSpore adapter asks the communication layer first when it is initialised; this is
the framework-free fallback that also serves a custom loop. Variables, in order of trust:
``RANK_ID``/``RANK_SIZE`` (Ascend launchers, msrun), ``RANK``/``WORLD_SIZE`` (torchrun
style), ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE`` (mpirun), ``MS_NODE_ID`` and
``MS_WORKER_NUM`` (MindSpore's dynamic cluster).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

_RANK_VARS = ("RANK_ID", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MS_NODE_ID")
_SIZE_VARS = ("RANK_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MS_WORKER_NUM")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MS_LOCAL_RANK")


@dataclass(frozen=True)
class RankInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0


def parse_index(text: str) -> int | None:
    """A rank or device number: ASCII digits (str.isdigit also accepts "²"), bounded so that
    int() stays cheap; None for anything else."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None


def env_int(env: Mapping[str, str], *names: str) -> int | None:
    """The first of ``names`` set to a number; None when none is (unset stays distinguishable
    from 0)."""
    for name in names:
        number = parse_index(env.get(name) or "")
        if number is not None:
            return number
    return None


def rank_from_env(env: Mapping[str, str] | None = None) -> RankInfo:
    env = os.environ if env is None else env
    rank = env_int(env, *_RANK_VARS) or 0
    world_size = max(env_int(env, *_SIZE_VARS) or 1, rank + 1)
    local_rank = env_int(env, *LOCAL_RANK_VARS)
    return RankInfo(rank=rank, world_size=world_size,
                    local_rank=rank if local_rank is None else local_rank)
