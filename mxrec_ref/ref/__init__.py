"""The reference model: the oracle every other backend is tested against."""
from .store import RefEngine, RefStore

__all__ = ["RefStore", "RefEngine"]
