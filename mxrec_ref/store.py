"""``mxrec_ref.store``: the names third-party backends and scripts import, kept importable.

The store layer lives in four modules now (DESIGN.md sections 8 and 9): the records
in ``mxrec_ref.state``, the facade in ``mxrec_ref.contract``, the engine protocol in
``mxrec_ref.engine``, the registry in ``mxrec_ref.backends``.  This module re-exports them;
the package itself imports none of it.
"""
from .backends import TIER_OPTIONS, available_backends, open_store, register_backend, unknown_backend_reason
from .contract import PAD_FLOATS_MAX, PAD_TO_MAX, InMemoryStore, Store, WarmStartPlan, logger
from .engine import Engine, InMemoryEngine, Resolved, TierMoves
from .state import PADDING_KEY, STAT_NAMES, LookupResult, TableState, merge_warm_start

__all__ = ["PADDING_KEY", "STAT_NAMES", "LookupResult", "TableState", "merge_warm_start", "Store", "InMemoryStore",
           "PAD_TO_MAX", "PAD_FLOATS_MAX", "open_store", "register_backend", "available_backends",
           "unknown_backend_reason", "TIER_OPTIONS", "logger", "WarmStartPlan", "Engine", "InMemoryEngine",
           "Resolved", "TierMoves"]
