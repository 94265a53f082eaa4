"""The fast path: the reference's rules over the Cython core (cext/_fast.pyx).

One module per spec family, with the reference's module and function names
(``mxrec_ref.ref.F`` <-> ``mxrec_ref.fast.F``); ``FastStore`` (fast/store.py)
calls them in the reference's order.
"""
from .store import FastEngine, FastStore

__all__ = ["FastStore", "FastEngine"]
