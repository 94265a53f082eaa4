"""Storage tiers: DDR (host memory) and SSD (disk) behind a fixed device budget (spec/tiers.md).

The engine behind the tiers is a ``mxrec_ref.engine.TierMoves`` (CON-10); it names its own
device placement (``RefDevicePlacement`` for the reference, ``FastDevicePlacement`` for the fast path).
"""
from .placement import RefDevicePlacement
from .store import TieredEngine, TieredStore

__all__ = ["TieredStore", "TieredEngine", "RefDevicePlacement", "FastDevicePlacement"]


def __getattr__(name: str):
    """``FastDevicePlacement`` lives with the fast path (mxrec_ref/fast/placement.py); it is still
    importable from here, as before, without this package importing the fast path itself."""
    if name == "FastDevicePlacement":
        from ..fast.placement import FastDevicePlacement    # local: the shared tiers never import the fast path
        return FastDevicePlacement
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
