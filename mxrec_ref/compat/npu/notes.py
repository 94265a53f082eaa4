"""How the NPU adapter's CPU face reports what it does not do (TF-29, as TF-15 for mx_rec names):
each NPU-only setting is accepted and logged once (logger ``mxrec_ref.tf``), at WARNING where the
NPU's result would differ from this machine's."""
from __future__ import annotations

import logging

from ...tf.config_initializer import log_once


def npu_only(name: str, reason: str, level: int = logging.INFO) -> None:
    log_once(f"npu:{name}", f"{name} is accepted and ignored: {reason}", level)
