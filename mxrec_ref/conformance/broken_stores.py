"""Deliberately broken stores: the conformance suite must catch them."""
from __future__ import annotations

import numpy as np

from ..ref import RefEngine, RefStore


class EarlyAdmissionEngine(RefEngine):
    """Admits a key one access too early (count >= threshold - 1): violates ADM-2."""

    backend_name = "early-admission"

    def admit_threshold(self) -> int:
        return max(1, self.config.admit_threshold - 1)


class EarlyAdmissionStore(RefStore):
    """The reference over ``EarlyAdmissionEngine``."""

    backend_name = "early-admission"
    engine_class = EarlyAdmissionEngine


class AscendingGradientStore(RefStore):
    """A broken optimizer: applies every gradient with its sign flipped (climbs the loss).  Each call is
    a valid apply, so only a model's quality shows it (bench/quality.py; tests/test_bench_quality.py)."""

    backend_name = "ascending-gradient"

    def apply_gradients(self, result, grad_rows, *, step: int) -> int:
        return super().apply_gradients(result, -np.asarray(grad_rows), step=step)
