"""What may differ between the PyTorch releases mindwatch serves, in one place.

Tested: torch 2.13 on the CPU (``make test-torch``; docs/versions.md). The APIs mindwatch
uses are public and older than every tested release: the optimizer step hooks
(``register_step_pre_hook``, 2.0), ``torch.nn.utils.get_total_norm`` and
``clip_grads_with_norm_`` (2.6), ``torch.cuda`` memory statistics, and ``torch.npu``'s, which
torch_npu adds with the same names.
"""
from __future__ import annotations

from typing import Any

from ..basics.versions import Release, ReleaseTable
from ..records import Versions

TESTED = ReleaseTable("PyTorch", ("2.13",))


def release() -> Release:
    """This process's torch, for the run record, and whether it is tested."""
    import torch
    version = getattr(torch, "__version__", None)
    return TESTED.release(Versions.TORCH, None if version is None else str(version))


def accelerator(torch: Any) -> tuple[str, Any]:
    """``("Ascend", torch.npu)``, ``("GPU", torch.cuda)`` or ``("CPU", None)``: the device
    module whose memory statistics count (torch_npu registers ``torch.npu`` when imported)."""
    npu = getattr(torch, "npu", None)
    try:
        if npu is not None and npu.is_available():
            return "Ascend", npu
    except Exception:
        pass
    try:
        if torch.cuda.is_available():
            return "GPU", torch.cuda
    except Exception:
        pass
    return "CPU", None
