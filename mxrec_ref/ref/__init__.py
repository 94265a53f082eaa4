"""The reference model: the oracle every other backend is tested against."""
from .store import RefStore

__all__ = ["RefStore"]
