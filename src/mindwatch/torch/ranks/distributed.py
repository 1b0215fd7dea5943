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


def replicated_state(world_size: int, ddp: bool, optimizer: object) -> bool:
    """Whether every rank holds the same training state (``FrameworkHooks.replicated``):
    several initialised ranks training a ``DistributedDataParallel`` model (``ddp``) with an
    optimizer that keeps its whole state on every rank. FSDP, DeepSpeed's engine and
    tensor-parallel modules are no DDP, and ``ZeroRedundancyOptimizer`` shards the optimizer
    state: each rank then saves its own part."""
    if world_size < 2 or not ddp or not initialised():
        return False
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return not isinstance(optimizer, ZeroRedundancyOptimizer)
