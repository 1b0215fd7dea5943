"""Rank and world size from ``torch.distributed`` when it is initialised, else from the
launcher's environment (torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from ...basics.rank import RankInfo, rank_from_env


def initialised() -> bool:
    return dist.is_available() and dist.is_initialized()


def current_rank() -> RankInfo:
    env = rank_from_env()
    if initialised():
        return RankInfo(rank=dist.get_rank(), world_size=dist.get_world_size(),
                        local_rank=env.local_rank)
    return env


def collective_device() -> torch.device:
    """Where the default process group's tensors must live: the current CUDA (or NPU)
    device for NCCL (HCCL), the CPU for gloo."""
    backend = str(dist.get_backend()).lower()
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "hccl":
        npu = torch.npu  # type: ignore[attr-defined,unused-ignore]  # torch_npu adds it
        return torch.device("npu", npu.current_device())
    return torch.device("cpu")
