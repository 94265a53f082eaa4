"""Storage tiers: DDR (host memory) and SSD (disk) behind a fixed device budget (spec/tiers.md)."""
from .placement import FastDevicePlacement, RefDevicePlacement
from .store import TieredStore


def placement_for(backend: str):
    """The device-placement bookkeeping of a backend: the reference's dict for
    "ref", the vectorised arrays for every other backend."""
    return RefDevicePlacement if backend == "ref" else FastDevicePlacement


__all__ = ["TieredStore", "RefDevicePlacement", "FastDevicePlacement", "placement_for"]
