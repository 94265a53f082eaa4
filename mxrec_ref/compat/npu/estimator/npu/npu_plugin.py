"""``npu_bridge.estimator.npu.npu_plugin`` (TF-29)."""
from __future__ import annotations

import logging

from ...notes import npu_only

SAT_MODES = {0: "saturation", 1: "INF/NaN"}


def set_device_sat_mode(mode):
    """The NPU's float overflow mode: 0 saturates, 1 gives INF/NaN.  A CPU computes IEEE floats
    (INF/NaN, mode 1) whatever is asked."""
    if isinstance(mode, bool) or mode not in SAT_MODES:
        raise ValueError(f"npu_plugin.set_device_sat_mode: mode: must be 0 or 1, got {mode!r}")
    npu_only(f"npu_plugin.set_device_sat_mode({mode})", "a CPU overflows to INF/NaN as IEEE floats do (mode 1)",
             logging.WARNING if mode == 0 else logging.INFO)
