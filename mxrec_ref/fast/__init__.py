"""The fast path: the reference's rules over the Cython core (cext/_fast.pyx).

One module per spec family, with the reference's module and function names
(``mxrec_ref.ref.F`` <-> ``mxrec_ref.fast.F``); ``FastStore`` (fast/store.py)
calls them in the reference's order.  The storage tiers' kernels have their twins here too, named
after the shared tier modules they serve (``mxrec_ref.tiers.placement`` <-> ``fast/placement.py``,
``mxrec_ref.tiers.disk`` <-> ``fast/disk.py``); the fast store names them (CON-10).
"""
from .store import FastEngine, FastStore

__all__ = ["FastStore", "FastEngine"]
