"""The fast path's eviction rules (spec/eviction.md): the twins of mxrec_ref/ref/eviction.py.

The cut-off (EVI-1) is written once in mxrec_ref/contract.py.  The kernels are cext/_eviction.pxi's:
``expired_keys`` (every key in the history last seen at or before the cut-off, ascending: EVI-1,
EVI-3) and ``remove_keys`` (freed rows join the free stack in the given order, hot keys leave the
hot set: EVI-2, EVI-3, HOT-2; returns the admitted and pending counts of STAT-4).
"""
from __future__ import annotations

from .._fast import expired_keys, remove_keys

__all__ = ["expired_keys", "remove_keys"]
