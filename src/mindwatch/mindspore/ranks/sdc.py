"""Whether MindSpore's own silent-data-corruption detection is on, for the ``run`` record.

On Ascend, MindSpore checks feature values of the gradients in the graph (``NPU_ASD_ENABLE``
1-3 from 2.4, with ``NPU_ASD_UPPER_THRESH`` and ``NPU_ASD_SIGMA_THRESH``) and, from 2.7.1,
combines them with a CheckSum of the matrix products that names the faulty device
(``MS_NPU_ASD_CONFIG="enable:true,with_checksum:true,..."``). It is configured by the
environment only, so that is what is recorded: every one of these variables that is set, and
whether they switch detection on. It acts on Ascend only; mindwatch's replay and replica
checks run on every device (docs/api.md, "Hardware faults").
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

SDC_ENVIRONMENT = ("MS_NPU_ASD_CONFIG", "NPU_ASD_ENABLE", "NPU_ASD_UPPER_THRESH",
                   "NPU_ASD_SIGMA_THRESH", "MS_SDC_DETECT_ENABLE")
ENABLED, ENVIRONMENT = "enabled", "env"
_TRUE = {"1", "true", "on", "yes"}


def _config_enables(config: str | None) -> bool:
    """``MS_NPU_ASD_CONFIG``'s ``enable`` (comma-separated ``key:value`` pairs)."""
    for item in (config or "").split(","):
        key, _, value = item.partition(":")
        if key.strip().lower() == "enable":
            return value.strip().lower() in _TRUE
    return False


def sdc_detection(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{"enabled": bool, "env": {variable: value}}`` for the variables that are set."""
    environ = os.environ if environ is None else environ
    found = {name: environ[name] for name in SDC_ENVIRONMENT if name in environ}
    enabled = (_config_enables(found.get("MS_NPU_ASD_CONFIG"))
               or found.get("NPU_ASD_ENABLE", "").strip() in {"1", "2", "3"}
               or found.get("MS_SDC_DETECT_ENABLE", "").strip().lower() in _TRUE)
    return {ENABLED: enabled, ENVIRONMENT: found}
