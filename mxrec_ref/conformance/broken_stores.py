"""Deliberately broken stores: the conformance suite must catch them."""
from __future__ import annotations

from ..ref import RefStore


class EarlyAdmissionStore(RefStore):
    """Admits a key one access too early (count >= threshold - 1): violates ADM-2."""

    backend_name = "early-admission"

    def _admit_threshold(self) -> int:
        return max(1, self.config.admit_threshold - 1)
