"""PyTorch's caching allocator accounting (CUDA, or Ascend through torch_npu), as a reader
for ``hardware.FrameworkMemoryProbe``: the same ``framework_memory`` fields as MindSpore's
memory pool, MB of 2**20 bytes."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...basics.units import MB
from ...records import FrameworkMemory
from ..compat import accelerator

# mindwatch's key -> the function of torch.cuda / torch.npu giving the figure, in bytes
ALLOCATOR_MEMORY = {
    FrameworkMemory.ALLOCATED_MB: "memory_allocated",
    FrameworkMemory.RESERVED_MB: "memory_reserved",
    FrameworkMemory.MAX_ALLOCATED_MB: "max_memory_allocated",
    FrameworkMemory.MAX_RESERVED_MB: "max_memory_reserved",
}


def torch_memory_reader(module: Any = None) -> Callable[[], dict[str, Any]]:
    """A callable returning ``{"device_target", "allocated_mb", ...}`` for this process's
    current device; None where there is no allocator (the CPU) or a query fails. Never
    raises. ``module``: a stand-in for ``torch``, for tests."""

    def read() -> dict[str, Any]:
        out: dict[str, Any] = {FrameworkMemory.DEVICE_TARGET: None,
                               **dict.fromkeys(ALLOCATOR_MEMORY)}
        try:
            if module is None:
                import torch as torch_module
            else:
                torch_module = module
            target, device = accelerator(torch_module)
            out[FrameworkMemory.DEVICE_TARGET] = target
            if device is None:
                return out
            for key, function in ALLOCATOR_MEMORY.items():
                try:
                    out[key] = float(getattr(device, function)()) / MB
                except Exception:
                    out[key] = None
        except Exception:
            pass  # whatever was read stays; the rest is unknown
        return out

    return read
