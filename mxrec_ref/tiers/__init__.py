"""Storage tiers: DDR (host memory) and SSD (disk) behind a fixed device budget (spec/tiers.md).

The engine behind the tiers is a ``mxrec_ref.engine.TierMoves`` (CON-10); it names its own
device placement (``RefDevicePlacement`` for the reference, ``FastDevicePlacement`` for the fast path).
"""
from .placement import FastDevicePlacement, RefDevicePlacement
from .store import TieredEngine, TieredStore

__all__ = ["TieredStore", "TieredEngine", "RefDevicePlacement", "FastDevicePlacement"]
